"""Which node holds which partition: the QUERY every sstq-fl ClientApp answers (:func:`answer_query`) and the
server's discovery that asks it (:func:`discover`), refusing a federation whose size is not the run's."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid

log = logging.getLogger("sstq_fl.flower")


def answer_query(msg: Message, context: Context) -> Message:
    """The QUERY handler of every sstq-fl ClientApp: this node's partition id and, where its node
    config sets it, the federation's size (``num-partitions``), checked against the run's clients."""
    answer: dict[str, Any] = {"partition-id": int(context.node_config["partition-id"])}
    if "num-partitions" in context.node_config:
        answer["num-partitions"] = int(context.node_config["num-partitions"])
    return Message(RecordDict({"node": ConfigRecord(answer)}), reply_to=msg)


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
