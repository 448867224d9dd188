"""The Flower ``ServerApp`` of an sstq-fl run, and the in-process simulation launcher.

Each round the server samples participants exactly as the vectorized engine does, sends
them ``θ`` and the round number, and receives wire bytes.  A client that raised, timed out,
declined (non-finite gradient) or sent a malformed or foreign message is left out of that
round's aggregate with its reason logged and recorded; the run goes on.  Decoding,
aggregation in frame coordinates, the norm cap, the step, evaluation, the privacy ledger and
the atomic checkpoints are the same code as the vectorized engine (``Trainer.server_round``),
so the same config and seed give the same metrics on both engines.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from sstq_fl.fl.engine import RoundState, RunConfig, Trainer

ROUND_TIMEOUT_S = 600.0  # override with $SSTQ_FL_ROUND_TIMEOUT


def _round_timeout() -> float:
    return float(os.environ.get("SSTQ_FL_ROUND_TIMEOUT", ROUND_TIMEOUT_S))


def _discover(grid: Grid, clients: int, timeout: float = 120.0) -> dict[int, int]:
    """Map partition id → node id (nodes register just after the server starts)."""
    deadline = time.time() + timeout
    nodes: list[int] = []
    while len(nodes) < clients and time.time() < deadline:
        nodes = list(grid.get_node_ids())
        time.sleep(0.05)
    if len(nodes) < clients:
        raise RuntimeError(f"only {len(nodes)} of {clients} Flower nodes connected")
    msgs = [Message(RecordDict({"q": ConfigRecord({})}), dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]
    out = {}
    for r in grid.send_and_receive(msgs, timeout=timeout):
        if not r.has_error():
            node: Any = r.content["node"]
            out[int(node["partition-id"])] = int(r.metadata.src_node_id)
    return out


def _round(grid: Grid, tr: Trainer, st: RoundState, nodes: dict[int, int], cfg_json: str) -> dict[str, Any]:
    assert st.theta is not None
    t = st.round + 1
    sent = tr.participants(t)
    dropped: list[dict[str, Any]] = [{"client": int(c), "reason": "node not connected"} for c in sent if c not in nodes]
    theta = ArrayRecord({"theta": Array(np.ascontiguousarray(st.theta.numpy()))})
    msgs = [Message(RecordDict({"config": ConfigRecord({"round": t, "run-config": cfg_json}), "model": theta}),
                    dst_node_id=nodes[int(c)], message_type=MessageType.TRAIN, group_id=str(t)) for c in sent if c in nodes]
    by_node = {v: k for k, v in nodes.items()}
    got: dict[int, bytes] = {}
    stats: dict[str, float] = {}
    answered = set()
    for r in grid.send_and_receive(msgs, timeout=_round_timeout()):
        cid = by_node.get(int(r.metadata.src_node_id), -1)
        answered.add(cid)
        why = _reply(r, t, cid, got, stats)
        if why:
            dropped.append({"client": cid, "reason": why})
    dropped += [{"client": int(c), "reason": "no reply before the round timeout"} for c in sent
                if c in nodes and int(c) not in answered]
    ids = np.array(sorted(got), dtype=np.int64)  # aggregate in client order, as the vectorized engine
    n = max(1, len(ids))
    stats = {k: (v / n if k.endswith("_mean") else v) for k, v in stats.items()}
    return tr.server_round(st, t, len(sent), ids, [got[int(c)] for c in ids], dropped, stats)


def _reply(r: Message, t: int, cid: int, got: dict[int, bytes], stats: dict[str, float]) -> str | None:
    """Accept one reply's bytes, or return why it is left out (never raises)."""
    if r.has_error():
        return f"client raised (code {r.error.code}): {str(r.error.reason).splitlines()[0][:200]}"
    try:
        rep: Any = r.content["reply"]
        if int(rep["partition-id"]) != cid or int(rep["round"]) != t:
            return "reply for another client or round"
        if "blob" not in rep:
            return str(rep.get("dropped", "no message"))
        blob = rep["blob"]
        if not isinstance(blob, bytes):
            return "reply payload is not bytes"
        for k, v in json.loads(str(rep.get("stats", "{}"))).items():
            stats[k] = stats.get(k, 0.0) + float(v)
    except (KeyError, TypeError, ValueError) as exc:
        return f"malformed reply: {exc}"
    got[cid] = blob
    return None


def make_server_app(cfg: RunConfig, out: Path, resume: bool, progress: bool, result: dict[str, Any]) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        tr = Trainer(cfg)
        st = tr.initial_state(out, resume)
        nodes = _discover(grid, cfg.clients)
        cfg_json = json.dumps(asdict(cfg), sort_keys=True)
        while st.round < cfg.rounds:
            t0 = time.perf_counter()
            rec = _round(grid, tr, st, nodes, cfg_json)
            tr.complete_round(out, st, rec, time.perf_counter() - t0, progress)
        result.update(tr.finish(out, st))

    return app


def run_flower(cfg: RunConfig, out: Path, resume: bool = False, progress: bool | None = None,
               client_cpus: float = 0.5, ray_address: str | None = None, client_gpus: float | None = None
               ) -> dict[str, Any]:
    """Run ``cfg`` on Flower's simulation engine (Ray), one SuperNode per client.

    ``ray_address`` (or ``$SSTQ_FL_RAY_ADDRESS``) attaches to an existing Ray cluster instead
    of starting a local one.  Clients get ``client_gpus`` GPUs each (default: 0.25 when CUDA is
    available, else 0), through Flower's client resources.
    """
    from flwr.simulation import run_simulation

    from clients.sstq_client import app as client_app

    result: dict[str, Any] = {}
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    address = ray_address or os.environ.get("SSTQ_FL_RAY_ADDRESS")
    init_args: dict[str, Any] = {"address": address} if address else {"num_cpus": os.cpu_count() or 2}
    if client_gpus is None:
        import torch

        client_gpus = 0.25 if torch.cuda.is_available() else 0.0
    server = make_server_app(cfg, out, resume, bool(progress), result)
    run_simulation(server_app=server, client_app=client_app, num_supernodes=cfg.clients,
                   backend_config={"init_args": init_args,
                                   "client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus}})
    if not result:
        raise RuntimeError(f"the Flower run did not finish (see the log); resume with --resume from {out}")
    return result
