"""The Flower server side of an sstq-fl run: a ``FedAvg`` subclass and the ``ServerApp``.

:class:`SstqFedAvg` overrides only what differs from Flower's ``FedAvg``:

* ``configure_train`` sends ``θ`` and the round to the round's participants, sampled from
  ``(seed, round)`` exactly as the vectorized engine samples them (not Flower's node sampler);
* ``aggregate_train`` decodes the **wire bytes** (never a weighted average of float arrays),
  aggregates in frame coordinates, caps the norm, steps, evaluates, charges the privacy
  ledger and checkpoints atomically: the same code as the vectorized engine
  (``Trainer.server_round``), so the same config and seed give the same metrics on both.

Federated evaluation is off (``fraction_evaluate=0``); the server evaluates ``θ`` itself.  A
client that raised, timed out or sent a malformed, foreign,
stale or replayed message is left out of that round's aggregate with its reason logged and
recorded (``rounds[t]["dropped"]`` in ``metrics.json``); nothing a reply holds can crash the
server (tests/fl/test_hostile.py, tests/test_wire_fuzz.py).

Which node holds which partition is learnt with a QUERY message at the first round and
refreshed when a node left or went silent and new nodes joined: a SuperNode restarted after a
crash (a new node id) rejoins the following rounds (tests/deployment).

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
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from sstq_fl import wire
from sstq_fl.fl.engine import RoundState, RunConfig, Trainer

log = logging.getLogger("sstq_fl.fl")
ROUND_TIMEOUT_S = 600.0  # override with $SSTQ_FL_ROUND_TIMEOUT


def _round_timeout() -> float:
    return float(os.environ.get("SSTQ_FL_ROUND_TIMEOUT", ROUND_TIMEOUT_S))


def discover(grid: Grid, clients: int, timeout: float = 120.0, nodes: Iterable[int] | None = None) -> dict[int, int]:
    """Map partition id → node id: ask each node (``nodes``, default: every connected node) for its
    partition with a QUERY message.

    Without ``nodes`` it first waits (up to ``timeout``) for ``clients`` nodes to connect (nodes
    register just after the server starts).  It returns as soon as every partition
    ``0..clients-1`` is mapped or every asked node answered, so a dead node that is still listed
    (until its heartbeat expires) costs nothing once the live ones have answered.  A node that
    claims a partition outside ``0..clients-1`` or one already claimed is ignored (logged).
    """
    deadline = time.time() + timeout
    if nodes is None:
        ids: list[int] = []
        while len(ids) < clients and time.time() < deadline:
            ids = list(grid.get_node_ids())
            time.sleep(0.05)
        if len(ids) < clients:
            raise RuntimeError(f"only {len(ids)} Flower nodes connected, the run config needs clients={clients}")
    else:
        ids = list(nodes)
    msgs = [Message(RecordDict({"q": ConfigRecord({})}), dst_node_id=n, message_type=MessageType.QUERY) for n in ids]
    pending = {m for m in grid.push_messages(msgs) if m}
    out: dict[int, int] = {}
    while pending and len(out) < clients:
        for r in grid.pull_messages(list(pending)):
            pending.discard(r.metadata.reply_to_message_id)
            if r.has_error():
                continue
            try:
                node: Any = r.content["node"]
                pid, src = int(node["partition-id"]), int(r.metadata.src_node_id)
            except (KeyError, TypeError, ValueError, OverflowError):
                log.warning("discovery: node %d sent a malformed answer", r.metadata.src_node_id)
                continue
            if not 0 <= pid < clients or pid in out:
                log.warning("discovery: node %d claims partition %d (invalid or already claimed by node %s); ignored",
                            src, pid, out.get(pid))
                continue
            out[pid] = src
        if pending and len(out) < clients:
            if time.time() >= deadline:
                break
            time.sleep(0.2)
    return out


def _reason(r: Message) -> str:
    """Why a reply carries a Flower error (the client raised, its node went away, ...)."""
    first = (str(r.error.reason).splitlines() or ["no reason given"])[0][:200] or "no reason given"
    if int(r.error.code) == ErrorCode.NODE_UNAVAILABLE:
        return f"node unavailable (missed its heartbeats): {first}"
    return f"client raised (code {r.error.code}): {first}"


MAX_STATS = 64  # a reply's encoder statistics: at most this many finite numbers


def read_reply(r: Message, t: int, cid: int, got: dict[int, bytes], stats: dict[int, dict[str, float]]) -> str | None:
    """Accept one reply's bytes into ``got[cid]`` (its encoder statistics into ``stats[cid]``), or
    return why it is left out.  Never raises: whatever a reply holds, the worst outcome is a
    reason (logged and recorded by the caller).  The bytes themselves are validated later, by
    the wire decoder."""
    if r.has_error():
        return _reason(r)
    if cid < 0:
        return f"reply from node {r.metadata.src_node_id}, which holds no partition of this run"
    try:
        rep: Any = r.content["reply"]
        if int(rep["partition-id"]) != cid or int(rep["round"]) != t:
            return "reply for another client or round"
        if "blob" not in rep:
            return "reply without a message"
        blob = rep["blob"]
        if not isinstance(blob, bytes):
            return "reply payload is not bytes"
        mine = json.loads(str(rep.get("stats", "{}")))
        if not isinstance(mine, dict) or len(mine) > MAX_STATS:
            return "malformed reply: statistics are not a small JSON object"
        mine = {str(k): float(v) for k, v in mine.items()}
        if not all(np.isfinite(v) for v in mine.values()):
            return "malformed reply: non-finite statistics"
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError, OverflowError) as exc:
        return f"malformed reply: {type(exc).__name__}: {str(exc)[:200]}"
    if cid in got:
        return "second reply from the same client in one round (replay) ignored"
    got[cid] = blob
    stats[cid] = mine
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
        self._targets: set[int] = set()  # the sampled clients a message went to this round
        self._msgs: list[Message] = []  # this round's messages (the grid sets their ids when it sends them)
        self._silent: set[int] = set()  # clients whose node did not answer last round (maybe gone)
        self._t0 = 0.0

    def summary(self) -> None:
        log.info("SstqFedAvg: encoder %s, %d clients, rounds %d..%d", self.tr.enc.spec, self.tr.cfg.clients,
                 self.offset + 1, self.tr.cfg.rounds)

    def refresh_nodes(self, grid: Grid) -> set[int]:
        """Connected node ids; re-map partitions whose node left or went silent when new nodes joined.

        A SuperNode that restarts registers with a **new** node id (without SuperNode
        authentication; with it, it comes back under its old id and nothing needs re-mapping).
        The old id stays listed until its heartbeats expire, so a partition is re-mapped when its
        node is no longer connected or did not answer last round, and some connected node is not
        in the mapping yet: those new nodes alone are asked for their partition.  With nodes that
        never change (simulation), this is one ``get_node_ids`` call and nothing else.
        """
        assert self.nodes is not None
        live = set(int(n) for n in grid.get_node_ids())
        missing = {c for c in range(self.tr.cfg.clients) if self.nodes.get(c) not in live} | self._silent
        new = live - set(self.nodes.values())
        if missing and new:
            found = discover(grid, self.tr.cfg.clients, timeout=min(60.0, _round_timeout()), nodes=sorted(new))
            for c, node in sorted(found.items()):
                if c in missing or c not in self.nodes:
                    log.warning("partition %d is now served by node %d (was node %s)", c, node, self.nodes.get(c))
                    self.nodes[c] = node
        return live

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        self._t0 = time.perf_counter()
        if self.nodes is None:
            self.nodes = discover(grid, self.tr.cfg.clients)
            live = set(self.nodes.values())
        else:
            live = self.refresh_nodes(grid)
        t = self.offset + server_round
        self._sent = self.tr.participants(t)
        self._targets = {int(c) for c in self._sent if self.nodes.get(int(c)) in live}
        conf = ConfigRecord({"round": t, "run-config": self.cfg_json})
        self._msgs = [Message(RecordDict({"config": conf, "model": arrays}), dst_node_id=self.nodes[c],
                              message_type=MessageType.TRAIN, group_id=str(t)) for c in sorted(self._targets)]
        return list(self._msgs)

    def _client_of(self, r: Message, by_node: dict[int, int]) -> int:
        """The partition a reply answers for: its sender's, or, for an error the SuperLink returns on a
        node's behalf (node unavailable, message expired), that of the node the message went to."""
        src = int(r.metadata.src_node_id)
        if src in by_node:
            return by_node[src]
        if r.has_error() and src == SUPERLINK_NODE_ID:
            sent_to = {m.metadata.message_id: int(m.metadata.dst_node_id) for m in self._msgs}
            return by_node.get(sent_to.get(r.metadata.reply_to_message_id, -1), -1)
        return -1

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        assert self.nodes is not None
        t = self.offset + server_round
        by_node = {v: k for k, v in self.nodes.items()}
        dropped = [{"client": int(c), "reason": "node not connected"} for c in self._sent if int(c) not in self._targets]
        got: dict[int, bytes] = {}
        stats_by: dict[int, dict[str, float]] = {}
        answered: set[int] = set()
        silent: set[int] = set()
        for r in replies:
            cid = self._client_of(r, by_node)
            answered.add(cid)
            if why := read_reply(r, t, cid, got, stats_by):
                dropped.append({"client": cid, "reason": why})
                if r.has_error() and int(r.error.code) == ErrorCode.NODE_UNAVAILABLE:
                    silent.add(cid)
        late = [int(c) for c in self._sent if int(c) in self._targets and int(c) not in answered]
        dropped += [{"client": c, "reason": "no reply before the round timeout"} for c in late]
        self._silent = silent | set(late)
        ids = np.array(sorted(got), dtype=np.int64)  # aggregate in client order, as the vectorized engine
        blobs = [got[int(c)] for c in ids]
        stats = self._stats(ids, blobs, t, stats_by) if self.tr.cfg.diagnostics else {}
        rec = self.tr.server_round(self.st, t, len(self._sent), ids, blobs, dropped, stats)
        self.tr.complete_round(self.out, self.st, rec, time.perf_counter() - self._t0, self.progress)
        return self.model_record(), MetricRecord({k: float(rec[k]) for k in _METRICS if k in rec})

    def _stats(self, ids: np.ndarray, blobs: list[bytes], t: int, stats_by: dict[int, dict[str, float]]) -> dict[str, float]:
        """Sum the encoder statistics of the messages the wire decoder accepts (``*_mean``: average)."""
        _, rejected = wire.unpack_lenient(self.tr.enc, blobs, round=t)
        bad = {int(ids[i]) for i, _ in rejected}
        ok = [int(c) for c in ids if int(c) not in bad]
        stats: dict[str, float] = {}
        for c in ok:
            for k, v in stats_by.get(c, {}).items():
                stats[k] = stats.get(k, 0.0) + v
        return {k: (v / max(1, len(ok)) if k.endswith("_mean") else v) for k, v in stats.items()}

    def model_record(self) -> ArrayRecord:
        assert self.st.theta is not None
        return ArrayRecord({"theta": Array(np.ascontiguousarray(self.st.theta.numpy()))})


_METRICS = ("train_loss", "test_accuracy", "distance_to_optimum", "bits_per_client", "epsilon_spent")


def serve(grid: Grid, cfg: RunConfig, out: Path, resume: bool = False, progress: bool = False,
          deployment: bool = False) -> dict[str, Any]:
    """Run (or resume) ``cfg`` through :class:`SstqFedAvg`; write and return ``metrics.json``.

    ``deployment``: the metrics leave out ``train_loss`` (computed on the pooled private data,
    which a real server does not hold)."""
    tr = Trainer(cfg, publish_train_loss=not deployment)
    st = tr.initial_state(out, resume)
    if st.round < cfg.rounds:
        strategy = SstqFedAvg(tr, st, out, progress)
        strategy.start(grid, strategy.model_record(), num_rounds=cfg.rounds - st.round, timeout=_round_timeout())
    return tr.finish(out, st)


def config_from_run_config(rc: dict[str, Any]) -> tuple[RunConfig, Path, bool]:
    """``[tool.flwr.app.config]`` (hyphenated keys) → ``RunConfig``, output directory, resume flag.

    TOML has no null: ``budget-epsilon = 0`` and ``data-dir = ""`` mean unset.  ``randomness``
    defaults to ``secure`` here (the app config's value): this is the deployment path.  A relative
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
    final = serve(grid, cfg, out, resume, deployment=True)["final"]
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
