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
crash (a new node id) rejoins the following rounds (tests/deployment).  A federation whose nodes
report a size (``num-partitions``) other than ``clients`` is refused at the first round.

Two entry points run the same strategy: ``app`` (configured from ``[tool.flwr.app.config]``
in ``pyproject.toml`` and ``flwr run . -c key=value``) and :func:`run_flower` (the
``sstq-fl run --engine flower`` path, on Flower's simulation engine over Ray, which one Ctrl-C
stops within seconds: :func:`simulate`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator
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


class FederationMismatch(RuntimeError):
    """The federation's size (the nodes' ``num-partitions``) is not the run config's ``clients``."""


def _mismatch(sizes: dict[int, int], clients: int) -> str | None:
    """Why the run cannot start, when every node that reported ``num-partitions`` reports the same
    size ``N != clients`` (a node disagreeing with the others is not enough: nothing is refused)."""
    found = set(sizes.values())
    if len(found) != 1 or clients in found:
        return None
    n = found.pop()
    return (f"the federation has {n} SuperNodes (num-partitions={n}, reported by {len(sizes)} node(s)) but the run config "
            f"has clients={clients}: run with --federation-config \"num-supernodes={clients}\" or -c \"clients={n}\"")


class _Discovery:
    """The state of one discovery: the nodes asked, the queries unanswered, the partitions and sizes found."""

    def __init__(self, grid: Grid, clients: int):
        self.grid, self.clients = grid, clients
        self.asked: set[int] = set()
        self.pending: set[str] = set()
        self.out: dict[int, int] = {}
        self.sizes: dict[int, int] = {}

    def ask(self, ids: Iterable[int]) -> None:
        """Send a QUERY (which partition do you hold?) to each node not asked yet."""
        new = sorted({int(n) for n in ids} - self.asked)
        msgs = [Message(RecordDict({"q": ConfigRecord({})}), dst_node_id=n, message_type=MessageType.QUERY) for n in new]
        if msgs:
            self.pending |= {m for m in self.grid.push_messages(msgs) if m}
        self.asked |= set(new)

    def collect(self) -> None:
        """Read the answers that arrived."""
        for r in self.grid.pull_messages(list(self.pending)) if self.pending else []:
            self.pending.discard(r.metadata.reply_to_message_id)
            if not r.has_error():
                self._claim(r)

    def _claim(self, r: Message) -> None:
        """Record one answer: its partition into ``out``, its federation size into ``sizes``."""
        try:
            node: Any = r.content["node"]
            pid, src = int(node["partition-id"]), int(r.metadata.src_node_id)
            if "num-partitions" in node:
                self.sizes[src] = int(node["num-partitions"])
        except (KeyError, TypeError, ValueError, OverflowError):
            log.warning("discovery: node %d sent a malformed answer", r.metadata.src_node_id)
            return
        if not 0 <= pid < self.clients or pid in self.out:
            log.warning("discovery: node %d claims partition %d (invalid or already claimed by node %s); ignored",
                        src, pid, self.out.get(pid))
            return
        self.out[pid] = src


def discover(grid: Grid, clients: int, timeout: float = 120.0, nodes: Iterable[int] | None = None) -> dict[int, int]:
    """Map partition id → node id: ask each node (``nodes``, default: every connected node, each as it
    connects: nodes register just after the server starts) for its partition with a QUERY message.

    It returns as soon as every partition ``0..clients-1`` is mapped or every asked node answered,
    so a dead node that is still listed (until its heartbeat expires) costs nothing once the live
    ones have answered.  A node that claims a partition outside ``0..clients-1`` or one already
    claimed is ignored (logged).  Without ``nodes`` it raises :class:`FederationMismatch` as soon as
    the nodes agree on a federation size (``num-partitions``; Flower's simulation sets it to
    ``num-supernodes``) other than ``clients``, and ``RuntimeError`` when fewer than ``clients``
    nodes connected within ``timeout``.
    """
    deadline, d = time.time() + timeout, _Discovery(grid, clients)
    while True:
        if nodes is None or not d.asked:
            d.ask(grid.get_node_ids() if nodes is None else nodes)
        d.collect()
        why = None if nodes is not None else _mismatch(d.sizes, clients)
        if why and (len(d.out) == clients or not d.pending):
            raise FederationMismatch(why)
        if len(d.out) == clients or time.time() >= deadline or (nodes is not None and not d.pending):
            break
        time.sleep(0.2 if d.pending else 0.05)
    if nodes is None and len(d.asked) < clients:
        raise RuntimeError(f"only {len(d.asked)} Flower nodes connected, the run config needs clients={clients}")
    return d.out


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

    One SIGINT (Ctrl-C) stops the simulation within seconds (:func:`_stop_on_sigint`): the round
    in progress is abandoned, every completed round is in its run's checkpoint, and
    ``KeyboardInterrupt`` is raised here once Flower has stopped its threads and Ray.
    """
    from clients.sstq_client import app as client_app

    if len({cfg.clients for cfg, _, _ in jobs}) != 1:
        raise ValueError("run_flower_many: every job must have the same number of clients")
    results: list[dict[str, Any]] = []
    server, stop = ServerApp(), threading.Event()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        for cfg, out, resume in jobs:
            results.append(serve(StoppableGrid(grid, stop), cfg, out, resume, bool(progress)))

    simulate(server, client_app, jobs[0][0].clients, _backend_config(client_cpus, ray_address, client_gpus), stop)
    if len(results) < len(jobs):
        if stop.is_set():
            raise KeyboardInterrupt
        raise RuntimeError(f"the Flower run stopped after {len(results)} of {len(jobs)} runs (see the log); "
                           f"resume with --resume from {jobs[len(results)][1]}")
    return results


def simulate(server: ServerApp, client_app: Any, nodes: int, backend_config: dict[str, Any], stop: threading.Event) -> None:
    """Flower's ``run_simulation`` with ``nodes`` SuperNodes, where one Ctrl-C sets ``stop`` and so ends the
    simulation within seconds (:func:`_stop_on_sigint`; the ServerApp must talk through a
    :class:`StoppableGrid` over ``stop``), and without Flower's deprecation banner for ``run_simulation``
    (:class:`_RunSimulationDeprecation`).  The caller tells an interrupted simulation by ``stop``."""
    from flwr.simulation import run_simulation

    with _stop_on_sigint(stop), _without_run_simulation_deprecation():
        try:
            run_simulation(server_app=server, client_app=client_app, num_supernodes=nodes, backend_config=backend_config)
        except Interrupted:
            pass


class Interrupted(Exception):
    """Raised by :class:`StoppableGrid` in the ServerApp's thread once a stop was asked for.

    An ``Exception``, not a ``KeyboardInterrupt``: Flower's ServerApp thread catches exceptions,
    sets the Simulation Runtime's stop event (its workers, Ray actors and Ray shut down) and
    re-raises the exception in the thread that called ``run_simulation``, without a traceback."""


class StoppableGrid(Grid):
    """A ``Grid`` that raises :class:`Interrupted` from its next call once ``stop`` is set.

    Every call goes to ``grid``; ``send_and_receive`` is re-implemented on top of
    ``push_messages``/``pull_messages`` (as Flower's grids do) so that a round waiting for
    replies notices the stop within one pull interval instead of waiting for the round timeout.
    The strategy checkpoints only after a round's replies are in, so stopping here never leaves
    a half-written round."""

    def __init__(self, grid: Grid, stop: threading.Event, pull_interval: float = 0.1):
        self._grid, self._stop, self.pull_interval = grid, stop, pull_interval

    def _check(self) -> None:
        if self._stop.is_set():
            raise Interrupted("stopped by SIGINT")

    def set_run(self, run: Any) -> None:
        self._grid.set_run(run)

    @property
    def run(self) -> Any:
        return self._grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        self._check()
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        self._check()
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        self._check()
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push ``messages`` and pull their replies until all are in or ``timeout`` passed (as Flower's grids)."""
        ids = set(self.push_messages(messages))
        end, out = time.time() + (timeout or 0.0), []
        while ids and (timeout is None or time.time() < end):
            got = list(self.pull_messages(ids))
            out += got
            ids -= {m.metadata.reply_to_message_id for m in got}
            if ids:
                time.sleep(self.pull_interval)
        return out


@contextlib.contextmanager
def _stop_on_sigint(stop: threading.Event) -> Iterator[None]:
    """While the simulation runs, the first SIGINT sets ``stop`` instead of raising ``KeyboardInterrupt`` in
    the main thread: there it broke Flower's thread-pool join with a traceback, and the process then
    waited for the ServerApp thread, still waiting for replies (up to the 600 s round timeout), until
    a second Ctrl-C.  A second SIGINT gets the previous handler.  Outside the main thread (where no
    handler can be installed) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


RUN_SIMULATION_DEPRECATION = "The `run_simulation` function is deprecated"


class _RunSimulationDeprecation(logging.Filter):
    """Drops exactly Flower's deprecation banner for ``flwr.simulation.run_simulation`` (logged by
    ``flwr.simulation.run_simulation.run_simulation`` through ``warn_deprecated_feature``).

    A known deprecation we keep on purpose: ``run_simulation`` runs the simulation in this
    process (the engine's in-memory results, one Ray start for many runs) and attaches to an
    existing Ray cluster (``init_args.address``), which ``flwr run`` does not.  Every other
    record, deprecations included, passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        first = str(record.args[0]) if isinstance(record.args, tuple) and record.args else ""
        return not (str(record.msg).startswith("DEPRECATED FEATURE") and first.startswith(RUN_SIMULATION_DEPRECATION))


@contextlib.contextmanager
def _without_run_simulation_deprecation() -> Iterator[None]:
    """Attach :class:`_RunSimulationDeprecation` to Flower's logger for the duration."""
    flower, quiet = logging.getLogger("flwr"), _RunSimulationDeprecation()
    flower.addFilter(quiet)
    try:
        yield
    finally:
        flower.removeFilter(quiet)


def _backend_config(client_cpus: float, ray_address: str | None, client_gpus: float | None) -> dict[str, Any]:
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    address = ray_address or os.environ.get("SSTQ_FL_RAY_ADDRESS")
    init_args: dict[str, Any] = {"address": address} if address else {"num_cpus": os.cpu_count() or 2}
    if client_gpus is None:
        import torch

        client_gpus = 0.25 if torch.cuda.is_available() else 0.0
    return {"init_args": init_args, "client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus}}
