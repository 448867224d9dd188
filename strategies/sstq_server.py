"""The Flower server side of an sstq-fl run: a ``FedAvg`` subclass and the ``ServerApp``.

:class:`SstqFedAvg` overrides only what differs from Flower's ``FedAvg``:

* ``configure_train`` sends ``θ`` and the round to the round's participants, sampled from
  ``(seed, round)`` exactly as the vectorized engine samples them (not Flower's node sampler);
* ``aggregate_train`` decodes the **wire bytes** (never a weighted average of float arrays),
  aggregates in frame coordinates, caps the norm, steps, evaluates, charges the privacy
  ledger and checkpoints atomically: the same code as the vectorized engine
  (``Trainer.server_round``), so the same config and seed give the same metrics on both.

Federated evaluation is off (``fraction_evaluate=0``); the server evaluates ``θ`` itself.  A
client that raised, timed out, declined (non-finite gradient) or sent a malformed or foreign
message is left out of that round's aggregate with its reason logged and recorded.

Two entry points run the same strategy: ``app`` (configured from ``[tool.flwr.app.config]``
in ``pyproject.toml`` and ``flwr run . -c key=value``) and :func:`run_flower` (the
``sstq-fl run --engine flower`` path, on Flower's simulation engine over Ray).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from sstq_fl.fl.engine import RoundState, RunConfig, Trainer

log = logging.getLogger("sstq_fl.fl")
ROUND_TIMEOUT_S = 600.0  # override with $SSTQ_FL_ROUND_TIMEOUT


def _round_timeout() -> float:
    return float(os.environ.get("SSTQ_FL_ROUND_TIMEOUT", ROUND_TIMEOUT_S))


def discover(grid: Grid, clients: int, timeout: float = 120.0) -> dict[int, int]:
    """Map partition id → node id (nodes register just after the server starts)."""
    deadline = time.time() + timeout
    nodes: list[int] = []
    while len(nodes) < clients and time.time() < deadline:
        nodes = list(grid.get_node_ids())
        time.sleep(0.05)
    if len(nodes) < clients:
        raise RuntimeError(f"only {len(nodes)} Flower nodes connected, the run config needs clients={clients}")
    msgs = [Message(RecordDict({"q": ConfigRecord({})}), dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]
    out = {}
    for r in grid.send_and_receive(msgs, timeout=timeout):
        if not r.has_error():
            node: Any = r.content["node"]
            out[int(node["partition-id"])] = int(r.metadata.src_node_id)
    return out


def read_reply(r: Message, t: int, cid: int, got: dict[int, bytes], stats: dict[str, float]) -> str | None:
    """Accept one reply's bytes into ``got``, or return why it is left out (never raises)."""
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
    if cid in got:
        return "second reply from the same client in one round (replay) ignored"
    got[cid] = blob
    return None


class SstqFedAvg(FedAvg):
    """``FedAvg`` whose clients send LDP-encoded wire bytes; one instance runs one (resumed) run.

    Flower's rounds ``1..num_rounds`` map to the run's rounds ``offset+1..`` (``offset`` =
    rounds already completed in the checkpoint), so a resumed run continues where it stopped.
    """

    def __init__(self, trainer: Trainer, state: RoundState, out: Path, progress: bool = False):
        n = trainer.cfg.clients
        super().__init__(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n, arrayrecord_key="model")
        self.tr, self.st, self.out, self.progress = trainer, state, out, progress
        self.offset = state.round
        self.cfg_json = json.dumps(asdict(trainer.cfg), sort_keys=True)
        self.nodes: dict[int, int] | None = None
        self._sent: np.ndarray = np.zeros(0, np.int64)
        self._t0 = 0.0

    def summary(self) -> None:
        log.info("SstqFedAvg: encoder %s, %d clients, rounds %d..%d", self.tr.enc.spec, self.tr.cfg.clients,
                 self.offset + 1, self.tr.cfg.rounds)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        self._t0 = time.perf_counter()
        if self.nodes is None:
            self.nodes = discover(grid, self.tr.cfg.clients)
        t = self.offset + server_round
        self._sent = self.tr.participants(t)
        conf = ConfigRecord({"round": t, "run-config": self.cfg_json})
        return [Message(RecordDict({"config": conf, "model": arrays}), dst_node_id=self.nodes[int(c)],
                        message_type=MessageType.TRAIN, group_id=str(t)) for c in self._sent if int(c) in self.nodes]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        assert self.nodes is not None
        t = self.offset + server_round
        by_node = {v: k for k, v in self.nodes.items()}
        dropped = [{"client": int(c), "reason": "node not connected"} for c in self._sent if int(c) not in self.nodes]
        got: dict[int, bytes] = {}
        stats: dict[str, float] = {}
        answered: set[int] = set()
        for r in replies:
            cid = by_node.get(int(r.metadata.src_node_id), -1)
            answered.add(cid)
            if why := read_reply(r, t, cid, got, stats):
                dropped.append({"client": cid, "reason": why})
        dropped += [{"client": int(c), "reason": "no reply before the round timeout"} for c in self._sent
                    if int(c) in self.nodes and int(c) not in answered]
        ids = np.array(sorted(got), dtype=np.int64)  # aggregate in client order, as the vectorized engine
        stats = {k: (v / max(1, len(ids)) if k.endswith("_mean") else v) for k, v in stats.items()}
        rec = self.tr.server_round(self.st, t, len(self._sent), ids, [got[int(c)] for c in ids], dropped, stats)
        self.tr.complete_round(self.out, self.st, rec, time.perf_counter() - self._t0, self.progress)
        return self.model_record(), MetricRecord({k: float(rec[k]) for k in _METRICS if k in rec})

    def model_record(self) -> ArrayRecord:
        assert self.st.theta is not None
        return ArrayRecord({"theta": Array(np.ascontiguousarray(self.st.theta.numpy()))})


_METRICS = ("train_loss", "test_accuracy", "distance_to_optimum", "bits_per_client", "epsilon_spent")


def serve(grid: Grid, cfg: RunConfig, out: Path, resume: bool = False, progress: bool = False) -> dict[str, Any]:
    """Run (or resume) ``cfg`` through :class:`SstqFedAvg`; write and return ``metrics.json``."""
    tr = Trainer(cfg)
    st = tr.initial_state(out, resume)
    if st.round < cfg.rounds:
        strategy = SstqFedAvg(tr, st, out, progress)
        strategy.start(grid, strategy.model_record(), num_rounds=cfg.rounds - st.round, timeout=_round_timeout())
    return tr.finish(out, st)


def config_from_run_config(rc: dict[str, Any]) -> tuple[RunConfig, Path, bool]:
    """``[tool.flwr.app.config]`` (hyphenated keys) → ``RunConfig``, output directory, resume flag.

    TOML has no null: ``budget-epsilon = 0`` and ``data-dir = ""`` mean unset.  A relative
    ``out-dir`` is taken relative to ``$SSTQ_FL_WORKDIR`` (else the SuperLink's working directory).
    """
    known = {f.name: f for f in fields(RunConfig)}
    kw: dict[str, Any] = {}
    for key, value in rc.items():
        name = key.replace("-", "_")
        if name in known:
            kw[name] = value
        elif key not in ("out-dir", "resume"):
            raise ValueError(f"unknown key {key!r} in the Flower run config (known: {sorted(known)} + out-dir, resume)")
    kw["budget_epsilon"] = kw.get("budget_epsilon") or None
    kw["data_dir"] = kw.get("data_dir") or None
    kw["engine"] = "flower"
    out = Path(str(rc.get("out-dir", "results/flwr-run")))
    if not out.is_absolute():
        out = Path(os.environ.get("SSTQ_FL_WORKDIR", ".")) / out
    return RunConfig(**kw), out.resolve(), bool(rc.get("resume", False))


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """``flwr run .``: the run is configured by the app config (and ``-c`` overrides)."""
    cfg, out, resume = config_from_run_config(dict(context.run_config))
    final = serve(grid, cfg, out, resume)["final"]
    log.info("sstq-fl run finished: %s → %s", json.dumps(final, default=str), out / "metrics.json")


def run_flower(cfg: RunConfig, out: Path, resume: bool = False, progress: bool | None = None,
               client_cpus: float = 0.5, ray_address: str | None = None, client_gpus: float | None = None
               ) -> dict[str, Any]:
    """Run ``cfg`` on Flower's simulation engine (Ray), one SuperNode per client.

    ``ray_address`` (or ``$SSTQ_FL_RAY_ADDRESS``) attaches to an existing Ray cluster instead
    of starting a local one.  Clients get ``client_gpus`` GPUs each (default: 0.25 when CUDA is
    available, else 0), through Flower's client resources.
    """
    return run_flower_many([(cfg, out, resume)], progress, client_cpus, ray_address, client_gpus)[0]


def run_flower_many(jobs: list[tuple[RunConfig, Path, bool]], progress: bool | None = None, client_cpus: float = 0.5,
                    ray_address: str | None = None, client_gpus: float | None = None) -> list[dict[str, Any]]:
    """Run several configs (e.g. one per encoder) one after another in **one** Flower simulation.

    The SuperNodes and their Ray actors are started once; each message carries its run's
    config, so the clients switch encoder with the server.  All jobs need the same ``clients``.
    """
    from flwr.simulation import run_simulation

    from clients.sstq_client import app as client_app

    if len({cfg.clients for cfg, _, _ in jobs}) != 1:
        raise ValueError("run_flower_many: every job must have the same number of clients")
    results: list[dict[str, Any]] = []
    server = ServerApp()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        for cfg, out, resume in jobs:
            results.append(serve(grid, cfg, out, resume, bool(progress)))

    run_simulation(server_app=server, client_app=client_app, num_supernodes=jobs[0][0].clients,
                   backend_config=_backend_config(client_cpus, ray_address, client_gpus))
    if len(results) < len(jobs):
        raise RuntimeError(f"the Flower run stopped after {len(results)} of {len(jobs)} runs (see the log); "
                           f"resume with --resume from {jobs[len(results)][1]}")
    return results


def _backend_config(client_cpus: float, ray_address: str | None, client_gpus: float | None) -> dict[str, Any]:
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    address = ray_address or os.environ.get("SSTQ_FL_RAY_ADDRESS")
    init_args: dict[str, Any] = {"address": address} if address else {"num_cpus": os.cpu_count() or 2}
    if client_gpus is None:
        import torch

        client_gpus = 0.25 if torch.cuda.is_available() else 0.0
    return {"init_args": init_args, "client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus}}
