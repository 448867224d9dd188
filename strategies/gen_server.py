"""Flower side of the DP generative workloads: a :class:`ClientPool` over Flower's ``Grid``.

The pipeline (privacy releases, noise, ledger, post-processing) runs in the ``ServerApp``;
each client request becomes one ``train`` message to the node holding that partition.  A
client that errs or times out is left out of that release (logged; data-independent dropout
is safe for record-level DP) and the pipeline goes on.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from sstq_fl.gen.runner import Arrays, ClientPool, Scalar, WorkloadData

from .sstq_server import StoppableGrid, _backend_config, discover, simulate

log = logging.getLogger("sstq_fl.gen")
TIMEOUT_S = float(os.environ.get("SSTQ_FL_ROUND_TIMEOUT", 1800))


class FlowerPool(ClientPool):
    """Client tasks on Flower SuperNodes (one per partition)."""

    def __init__(self, data: WorkloadData, grid: Grid):
        super().__init__(data)
        self.grid = grid
        self.nodes = discover(grid, data.clients)

    def map(self, task: str, payload: Arrays, config: dict[str, Scalar], seed: int, round: int) -> dict[int, Arrays]:
        conf = ConfigRecord({"task": task, "config": json.dumps(config), "data": self.data.to_json(), "seed": seed,
                             "round": round})
        arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in payload.items()})
        msgs = [Message(RecordDict({"request": conf, "payload": arrays}), dst_node_id=node,
                        message_type=MessageType.TRAIN, group_id=f"{task}:{round}") for node in self.nodes.values()]
        by_node = {v: k for k, v in self.nodes.items()}
        out: dict[int, Arrays] = {}
        answered: set[int] = set()
        for r in self.grid.send_and_receive(msgs, timeout=TIMEOUT_S):
            cid = by_node.get(int(r.metadata.src_node_id), -1)
            answered.add(cid)
            if r.has_error():
                self._drop(task, cid, f"client raised: {str(r.error.reason).splitlines()[0][:200]}")
                continue
            out[cid] = {k: np.asarray(v.numpy()) for k, v in r.content.array_records["result"].items()}
        for cid in sorted(set(self.nodes) - answered):
            self._drop(task, cid, "no reply before the timeout")
        return dict(sorted(out.items()))

    def _drop(self, task: str, cid: int, why: str) -> None:
        log.warning("%s: client %d left out: %s", task, cid, why)
        self.dropped.append({"task": task, "client": cid, "reason": why})


def run_on_flower(pipeline: Callable[[ClientPool], dict[str, Any]], data: WorkloadData, device: str = "cpu",
                  client_cpus: float = 1.0) -> dict[str, Any]:
    """Run ``pipeline`` in a ``ServerApp`` on Flower's simulation engine (Ray), one SuperNode per client.
    With ``device="cuda"`` each client asks Flower for a share of a GPU (client resources).  One Ctrl-C
    stops it within seconds and raises ``KeyboardInterrupt`` (:func:`~strategies.sstq_server.simulate`)."""
    from clients.gen_client import app as client_app

    result: dict[str, Any] = {}
    server, stop = ServerApp(), threading.Event()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        result.update(pipeline(FlowerPool(data, StoppableGrid(grid, stop))))

    gpus = 1.0 / data.clients if device.startswith("cuda") else 0.0
    simulate(server, client_app, data.clients, _backend_config(client_cpus, None, gpus), stop)
    if not result:
        if stop.is_set():
            raise KeyboardInterrupt
        raise RuntimeError("the Flower workload did not finish (see the log)")
    return result
