"""Flower side of the DP generative workloads: a :class:`ClientPool` over Flower's ``Grid``.

The pipeline (privacy releases, noise, ledger, post-processing) runs in the ``ServerApp``;
each client request becomes one ``train.gen`` message to the node holding that partition (the
project's one ClientApp, :mod:`sstq_fl.flower.apps.sstq_client`, serves training and workloads).  A client
that errs or times out is left out of that release (logged; data-independent dropout is safe for
record-level DP) and the pipeline goes on.  Discovery, the round timeout (run-config key
``round-timeout``) and error attribution are the training stack's (:mod:`sstq_fl.flower.discovery`,
:mod:`sstq_fl.config.flower`, :mod:`sstq_fl.flower.replies`).

Two ways in: :func:`run_on_flower` (the ``flower-workload`` backend: a Flower simulation of its
own) and :func:`serve_workload` (``flwr run .`` with a DP generative ``workload``: the federation the
ServerApp runs in, attached with :func:`sstq_fl.gen.runner.attached_pool`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from sstq_fl.config.flower import WORKLOAD_TIMEOUT_S, round_timeout
from sstq_fl.data.workload import WorkloadData
from sstq_fl.flower.apps.gen_client import TRUST_AGGREGATOR, trusts_aggregator
from sstq_fl.flower.discovery import discover
from sstq_fl.flower.replies import error_reason, sender
from sstq_fl.flower.simulation import backend_config, simulate
from sstq_fl.flower.stopping import StoppableGrid
from sstq_fl.gen.runner import Arrays, ClientPool, Scalar, attached_pool

log = logging.getLogger("sstq_fl.gen")
GEN_MESSAGE_TYPE = "train.gen"


class FlowerPool(ClientPool):
    """Client tasks on Flower SuperNodes (one per partition)."""

    def __init__(self, data: WorkloadData, grid: Grid, timeout: float | None = None):
        super().__init__(data)
        self.grid, self.timeout = grid, timeout or round_timeout(default=WORKLOAD_TIMEOUT_S)
        self.nodes = discover(grid, data.clients)

    def map(self, task: str, payload: Arrays, config: dict[str, Scalar], seed: int, round: int) -> dict[int, Arrays]:
        conf = ConfigRecord({"task": task, "config": json.dumps(config), "data": self.data.to_json(), "seed": seed,
                             "round": round})
        arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in payload.items()})
        msgs = [Message(RecordDict({"request": conf, "payload": arrays}), dst_node_id=node,
                        message_type=GEN_MESSAGE_TYPE, group_id=f"{task}:{round}") for node in self.nodes.values()]
        by_node = {v: k for k, v in self.nodes.items()}
        out: dict[int, Arrays] = {}
        answered: set[int] = set()
        for r in self.grid.send_and_receive(msgs, timeout=self.timeout):
            cid = by_node.get(sender(r, msgs), -1)
            answered.add(cid)
            if r.has_error():
                self._drop(task, cid, error_reason(r))
                continue
            out[cid] = {k: np.asarray(v.numpy()) for k, v in r.content.array_records["result"].items()}
        for cid in sorted(set(self.nodes) - answered):
            self._drop(task, cid, "no reply before the round timeout")
        return dict(sorted(out.items()))

    def _drop(self, task: str, cid: int, why: str) -> None:
        log.warning("%s: client %d left out: %s", task, cid, why)
        self.dropped.append({"task": task, "client": cid, "reason": why})


SIMULATION_NODES = {TRUST_AGGREGATOR: True}
"""The node config of the nodes :func:`run_on_flower` starts: their operator (this process) opts in to a trusted
aggregator, as the in-process engine's clients implicitly do."""


def run_on_flower(pipeline: Callable[[ClientPool], dict[str, Any]], data: WorkloadData, device: str = "cpu",
                  client_cpus: float = 1.0, node_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``pipeline`` in a ``ServerApp`` on Flower's simulation engine (Ray), one SuperNode per client.
    With ``device="cuda"`` each client asks Flower for a share of a GPU (client resources).  One Ctrl-C
    stops it within seconds and raises ``KeyboardInterrupt`` (:func:`~sstq_fl.flower.simulation.simulate`).

    ``node_config``: what the simulated nodes' operator sets (default :data:`SIMULATION_NODES`, the opt-in to a
    trusted aggregator, said in the log), e.g. a ``client-budget-epsilon`` every client's ledger must keep."""
    from sstq_fl.flower.apps.sstq_client import make_client_app

    nodes = dict(SIMULATION_NODES if node_config is None else node_config)
    if trusts_aggregator(nodes):
        log.warning("the %d simulated clients opt in to a trusted aggregator (node config %s=true): they send "
                    "clipped sums unnoised to this process, whose noise is the guarantee", data.clients,
                    TRUST_AGGREGATOR)
    client_app = make_client_app(node_defaults=nodes)

    result: dict[str, Any] = {}
    server, stop = ServerApp(), threading.Event()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        result.update(pipeline(FlowerPool(data, StoppableGrid(grid, stop))))

    gpus = 1.0 / data.clients if device.startswith("cuda") else 0.0
    simulate(server, client_app, data.clients, backend_config(client_cpus, None, gpus), stop)
    if not result:
        if stop.is_set():
            raise KeyboardInterrupt
        raise RuntimeError("the Flower workload did not finish (see the log)")
    return result


def serve_workload(grid: Grid, rc: dict[str, Any]) -> dict[str, Any]:
    """``flwr run .`` with ``workload`` naming a registered DP generative pipeline (``"dp-mepf"``, ``"dp-vqg"``,
    ``"straightdp"``, or a plug-in's; :data:`sstq_fl.gen.pipelines.PIPELINES`): run it on this federation (its
    clients are this run's SuperNodes), writing to ``out-dir``."""
    from sstq_fl.config.flower import out_dir, workload_from_run_config, workload_of
    from sstq_fl.gen.pipelines import PIPELINES, workloads

    pipeline = PIPELINES[workload_of(rc, workloads())]
    cfg, out, timeout = workload_from_run_config(rc, pipeline.config), out_dir(rc), round_timeout(rc, WORKLOAD_TIMEOUT_S)
    with attached_pool(lambda data: FlowerPool(data, grid, timeout)):
        metrics = pipeline.run(cfg, out, force=bool(rc.get("resume", False)))
    log.info("%s finished: accuracy %s, domain-FD %s, epsilon %s → %s", pipeline.name, metrics["downstream_accuracy"],
             metrics["domain_fd"], metrics.get("epsilon"), out / "metrics.json")
    return metrics
