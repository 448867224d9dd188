"""Flower plumbing shared by every sstq-fl app (training and the DP generative workloads).

The one place, with :mod:`sstq_fl.flower.mod` and :mod:`sstq_fl.flower.decoding`, where the
package imports Flower: node discovery (which node holds which partition), the round timeout
(a run-config key), attributing a reply (and an error the SuperLink returns on a node's behalf)
to its node, the QUERY handler the ClientApps share, and the in-process simulation launcher
that one Ctrl-C stops within seconds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp

from ..checks import require
from ..progress import QUIET_FLOWER_ENV

log = logging.getLogger("sstq_fl.flower")
ROUND_TIMEOUT_S = 600.0
WORKLOAD_TIMEOUT_S = 1800.0


def round_timeout(run_config: Mapping[str, Any] | None = None, default: float = ROUND_TIMEOUT_S) -> float:
    """Seconds a round waits for replies: the run config's ``round-timeout`` where set (> 0), else
    ``$SSTQ_FL_ROUND_TIMEOUT`` (the SuperLink's environment, e.g. docker/compose.yaml), else ``default``
    (600 s for a training round; the DP workloads pass :data:`WORKLOAD_TIMEOUT_S`, one client task
    covering all of a client's records).  A client that has not answered by then is left out."""
    value = float((run_config or {}).get("round-timeout", 0) or 0)
    if value > 0:
        return value
    return float(os.environ.get("SSTQ_FL_ROUND_TIMEOUT", default))


def answer_query(msg: Message, context: Context) -> Message:
    """The QUERY handler of every sstq-fl ClientApp: this node's partition id and, where its node
    config sets it, the federation's size (``num-partitions``), checked against the run's clients."""
    answer: dict[str, Any] = {"partition-id": int(context.node_config["partition-id"])}
    if "num-partitions" in context.node_config:
        answer["num-partitions"] = int(context.node_config["num-partitions"])
    return Message(RecordDict({"node": ConfigRecord(answer)}), reply_to=msg)


_ERROR_KIND = {ErrorCode.NODE_UNAVAILABLE: "node unavailable (missed its heartbeats)",
               ErrorCode.MESSAGE_UNAVAILABLE: "message unavailable (expired before the node pulled it)",
               ErrorCode.REPLY_MESSAGE_UNAVAILABLE: "reply unavailable (expired before the server pulled it)",
               ErrorCode.MOD_FAILED_PRECONDITION: "client mod refused (code 6)",
               ErrorCode.LOAD_CLIENT_APP_EXCEPTION: "the node could not load the ClientApp (code 1)",
               ErrorCode.CLIENT_APP_CRASHED: "ClientApp process crashed (code 8)"}


REASON_CHARS = 2000  # a reason's first line is kept whole up to this (a mod's refusal names two encoder configurations)


def error_reason(r: Message) -> str:
    """Why a reply carries a Flower error, in one line: the kind (the client raised, a mod refused, its
    node went away, a message expired, ...) and the first line of the reason (up to :data:`REASON_CHARS`)."""
    first = (str(r.error.reason).splitlines() or ["no reason given"])[0][:REASON_CHARS] or "no reason given"
    code = int(r.error.code)
    return f"{_ERROR_KIND.get(code, f'client raised (code {code})')}: {first}"


def node_unavailable(r: Message) -> bool:
    """The reply is the SuperLink's note that the node missed its heartbeats."""
    return r.has_error() and int(r.error.code) == ErrorCode.NODE_UNAVAILABLE


def sender(r: Message, sent: Iterable[Message]) -> int:
    """The node a reply answers for: its source, or, for an error the SuperLink returns on a node's
    behalf (node unavailable, message expired), the node the message it answers went to (-1 if
    none of ``sent``)."""
    src = int(r.metadata.src_node_id)
    if r.has_error() and src == SUPERLINK_NODE_ID:
        to = {m.metadata.message_id: int(m.metadata.dst_node_id) for m in sent}
        return to.get(r.metadata.reply_to_message_id, -1)
    return src


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


def simulate(server: ServerApp, client_app: Any, nodes: int, backend_config: dict[str, Any], stop: threading.Event,
             quiet: bool | None = None) -> None:
    """Flower's ``run_simulation`` with ``nodes`` SuperNodes, where one Ctrl-C sets ``stop`` and so ends the
    simulation within seconds (:func:`_stop_on_sigint`; the ServerApp must talk through a
    :class:`StoppableGrid` over ``stop``), and without Flower's deprecation banner for ``run_simulation``
    (:class:`_RunSimulationDeprecation`).  ``quiet``: hide Flower's INFO logs (:func:`flower_logs_hidden`;
    default: ``$SSTQ_FL_QUIET_FLOWER``, which the command line sets).  The caller tells an interrupted
    simulation by ``stop``.  Without Ray (the ``simulation`` extra) a one-line ``ValueError``."""
    require("ray", "Flower's simulation engine (--engine flower; --engine vectorized runs without it)")
    from flwr.simulation import run_simulation

    with _stop_on_sigint(stop), _without_run_simulation_deprecation(), flower_logs_hidden(quiet):
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


@contextlib.contextmanager
def flower_logs_hidden(hide: bool | None = None) -> Iterator[None]:
    """While the block runs, Flower's own INFO and DEBUG records (per-round summaries, start-up banners)
    are not emitted, so sstq-fl's one progress line per round is what a simulation prints; WARNING and
    above (errors included) still show.  The ``flwr`` logger's level is raised to WARNING (its children
    inherit it; its own console handler and the root's handlers see nothing below) and restored after.
    Ray's driver logging is already at WARNING (Flower's default ``init_args.logging_level``) and the
    actors' output still reaches the driver (``log_to_driver``), so a client's traceback stays visible.

    ``hide``: default ``$SSTQ_FL_QUIET_FLOWER`` (set and not ``0``); off, nothing changes, so a library
    caller or ``flwr run`` keeps Flower's normal logs."""
    if hide is None:
        hide = os.environ.get(QUIET_FLOWER_ENV, "0") not in ("", "0")
    flower = logging.getLogger("flwr")
    level = flower.level
    if hide:
        flower.setLevel(max(logging.WARNING, level))
    try:
        yield
    finally:
        flower.setLevel(level)


class _Rewrite(logging.Filter):
    """Passes each record of Flower's logger through ``rewrite`` (its message → a new one, or ``None``: dropped)."""

    def __init__(self, rewrite: Callable[[str], str | None]):
        super().__init__()
        self.rewrite = rewrite

    def filter(self, record: logging.LogRecord) -> bool:
        line = self.rewrite(record.getMessage())
        if line is None:
            return False
        record.msg, record.args = line, ()
        return True


@contextlib.contextmanager
def flower_log_rewritten(rewrite: Callable[[str], str | None]) -> Iterator[None]:
    """While the block runs, each line Flower logs passes through ``rewrite`` (e.g. a wrapped strategy's
    summary naming a weighting the wrapper does not use)."""
    flower, f = logging.getLogger("flwr"), _Rewrite(rewrite)
    flower.addFilter(f)
    try:
        yield
    finally:
        flower.removeFilter(f)


def summary_level() -> int:
    """The level of a strategy's ``summary()`` lines: INFO where Flower's own INFO logs show (they join
    Flower's "Starting strategy" banner), DEBUG where :func:`flower_logs_hidden` hides that banner."""
    return logging.INFO if logging.getLogger("flwr").isEnabledFor(logging.INFO) else logging.DEBUG


def client_resource(value: float | None, env: str, default: Callable[[], float]) -> float:
    """A Ray resource per node's actor: ``value`` where given, else ``$env`` where set (``sstq-fl run
    --client-cpus`` / ``--client-gpus`` set ``$SSTQ_FL_CLIENT_CPUS`` / ``$SSTQ_FL_CLIENT_GPUS``), else ``default()``."""
    if value is not None:
        return float(value)
    return float(os.environ[env]) if os.environ.get(env) else default()


def _cuda_share() -> float:
    """0.25 GPU per actor where CUDA is available (four nodes share one GPU), else 0."""
    import torch

    return 0.25 if torch.cuda.is_available() else 0.0


def backend_config(client_cpus: float, ray_address: str | None, client_gpus: float | None) -> dict[str, Any]:
    """Flower's simulation backend config: Ray started locally (or attached at ``ray_address`` /
    ``$SSTQ_FL_RAY_ADDRESS``), ``client_cpus`` and ``client_gpus`` per client (GPUs: else
    ``$SSTQ_FL_CLIENT_GPUS``, else 0.25 where CUDA is available, else 0)."""
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    address = ray_address or os.environ.get("SSTQ_FL_RAY_ADDRESS")
    init_args: dict[str, Any] = {"address": address} if address else {"num_cpus": os.cpu_count() or 2}
    gpus = client_resource(client_gpus, "SSTQ_FL_CLIENT_GPUS", _cuda_share)
    return {"init_args": init_args, "client_resources": {"num_cpus": client_cpus, "num_gpus": gpus}}
