"""Cohort nodes: one simulated Flower node hosts a cohort of ``M`` virtual clients.

With ``clients-per-node M`` (simulation only) node ``k`` hosts the virtual clients
``k·M .. k·M + M − 1``.  The server sends each node with sampled clients **one** ``train.cohort``
message naming them (:data:`KEY_COHORT`); the node runs them the way the in-process engine runs a
round (one batched per-client gradient, one batched encode, each client with its own coins: in
secure mode its own OS-CSPRNG key) and replies with one wire message per virtual client, each
its own ``Array`` under :func:`message_key` in one ArrayRecord.  :class:`CohortDecoding` then
treats each message as a separate client: validated and rejected with its reason one by one,
and charged to that client in the ledger.  A deployment keeps one client per SuperNode: the
ServerApp refuses ``clients-per-node > 1`` up front in a ``flwr-serverapp`` process, and the ClientApp
refuses a cohort message in a one-shot ``flwr-clientapp`` process (:func:`refuse_in_deployment`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType

from .decoding import LdpDecoding
from .mod import WIRE_KEY, WIRE_STYPE, wire_array
from .replies import REASON_CHARS, error_reason, node_unavailable, sender

COHORT_ACTION = "cohort"
COHORT_MESSAGE_TYPE = f"{MessageType.TRAIN}.{COHORT_ACTION}"
KEY_COHORT = "cohort-clients"  # the train config's list of the virtual clients a node runs this round
KEY_REFUSALS = "ldp-refusals"  # a cohort reply's ConfigRecord: message_key(client) → why that client sent nothing
REFUSED = "client refused: "  # starts a cohort refusal's reason as the server records it


DEPLOYMENT_PROCESSES = ("flwr-clientapp", "flwr-serverapp")
"""The deployment runtime's app processes (Flower itself tells them by ``sys.argv[0]``); the simulation
runtime runs apps in Ray actors or ``flwr-simulation``, ``sstq-fl run`` in its own process."""


def deployment_process() -> bool:
    """True in a deployment runtime's app process: a ``flwr-clientapp`` handles one message and exits, a
    ``flwr-serverapp`` serves one run against real SuperNodes."""
    return Path(sys.argv[0]).name in DEPLOYMENT_PROCESSES


def refuse_in_deployment(per_node: int) -> None:
    """``ValueError`` when cohorts (``per_node > 1``) are asked for in a deployment process."""
    if per_node > 1 and deployment_process():
        raise ValueError(f"clients-per-node = {per_node}: cohort nodes are for simulation only; a deployment runs "
                         "one client per SuperNode (set clients-per-node = 1)")


def node_count(clients: int, per_node: int) -> int:
    """How many simulated nodes host ``clients`` virtual clients, ``per_node`` each (the last maybe fewer)."""
    return -(-clients // per_node)


def node_clients(node: int, clients: int, per_node: int) -> range:
    """The virtual clients node (partition) ``node`` hosts."""
    return range(node * per_node, min(clients, (node + 1) * per_node))


def message_key(client: int) -> str:
    """The ArrayRecord key of virtual client ``client``'s wire message in its node's reply."""
    return f"{WIRE_KEY}:{client}"


def cohort_record(ids: Sequence[int], blobs: Sequence[bytes]) -> ArrayRecord:
    """A cohort reply's ArrayRecord: each virtual client's wire message as its own raw-bytes ``Array``."""
    return ArrayRecord({message_key(int(c)): wire_array(b) for c, b in zip(ids, blobs)})


def refusal_record(refused: dict[int, str]) -> ConfigRecord:
    """A cohort reply's refusals: each refusing virtual client's one-line reason under :func:`message_key`."""
    return ConfigRecord({message_key(c): str(why).splitlines()[0] if why else "refused" for c, why in refused.items()})


def refusals(reply: Message, clients: Sequence[int]) -> dict[int, str]:
    """The refusals a cohort reply states for the asked ``clients``, as the server records them."""
    rec = reply.content.config_records.get(KEY_REFUSALS)
    if rec is None:
        return {}
    return {c: f"{REFUSED}{str(rec[message_key(c)])[:REASON_CHARS]}" for c in clients
            if message_key(c) in rec}


def cohort_of(msg: Message) -> list[int]:
    """The virtual clients a ``train.cohort`` message asks for (``ValueError`` if it names none)."""
    for conf in msg.content.config_records.values():
        if KEY_COHORT in conf:
            return [int(c) for c in conf[KEY_COHORT]]  # type: ignore[union-attr]
    raise ValueError(f"the cohort message has no {KEY_COHORT!r} in its ConfigRecord")


def cohort_blobs(reply: Message, clients: Sequence[int]) -> dict[int, bytes]:
    """A cohort reply's wire messages by virtual client; ``ValueError`` naming what is wrong when its
    structure is not one ArrayRecord of raw wire messages of (some of) the asked ``clients``."""
    recs = reply.content.array_records
    if len(recs) != 1:
        raise ValueError(f"reply holds {len(recs)} ArrayRecords, not one record of LDP messages")
    rec = next(iter(recs.values()))
    keys = {message_key(c): c for c in clients}
    unasked = [k for k in rec.keys() if k not in keys]
    if unasked:
        raise ValueError(f"reply holds {len(unasked)} messages for clients this round did not ask ({unasked[0]!r}, ...)")
    out: dict[int, bytes] = {}
    for k, arr in rec.items():
        if arr.stype != WIRE_STYPE or not isinstance(arr.data, bytes):
            raise ValueError(f"{k!r} is not an LDP message")
        out[keys[k]] = arr.data
    return out


class CohortDecoding(LdpDecoding):
    """:class:`LdpDecoding` for cohort nodes: a node's reply holds one wire message per virtual client,
    and every virtual client is a client of its own (validation, reasons, ledger, participation).

    ``identify`` maps a node id to its partition (cohort index): what ``silent`` reports and what a
    reply from a node this round did not ask is attributed to."""

    def asked_clients(self) -> int:
        """How many virtual clients this round's messages asked for."""
        return sum(len(cohort_of(m)) for m in self._sent)

    def sent_clients(self) -> list[int]:
        """The virtual clients this round's messages ask (each node's cohort), one message each."""
        return [c for m in self._sent for c in cohort_of(m)]

    def _collect(self, replies: list[Message]) -> tuple[list[int], list[bytes], list[Message], list[dict[str, Any]]]:
        """Each asked virtual client's wire message; the others, with why they are left out."""
        asked = {int(m.metadata.dst_node_id): cohort_of(m) for m in self._sent}
        clients: list[int] = []
        blobs: list[bytes] = []
        kept: list[Message] = []
        dropped: list[dict[str, Any]] = []
        replied: set[int] = set()
        self._silent = set()
        for r in replies:
            node = sender(r, self._sent)
            if node_unavailable(r):
                self._silent.add(node)
            got, why = self._unpack(r, node, asked, replied)
            replied.add(node)
            whose = asked.get(node, [self.identify(node) if node >= 0 else node])
            if got is None:
                dropped += [{"client": c, "reason": why} for c in whose]
                continue
            refused = refusals(r, whose)
            for c in whose:
                if c in got:
                    clients.append(c)
                    blobs.append(got[c])
                    kept.append(r)
                else:
                    dropped.append({"client": c, "reason": refused.get(c, "its node's reply holds no message for it")})
        for n in sorted(set(asked) - replied, key=self.identify):
            self._silent.add(n)
            dropped += [{"client": c, "reason": "no reply before the round timeout"} for c in asked[n]]
        return clients, blobs, kept, dropped

    def _unpack(self, r: Message, node: int, asked: dict[int, list[int]], replied: set[int]
                ) -> tuple[dict[int, bytes] | None, str | None]:
        """One node's reply: its messages by virtual client, or why the whole reply is left out."""
        if r.has_error():
            return None, error_reason(r)
        if node not in asked:
            return None, f"reply from node {node}, which this round did not ask"
        if node in replied:
            return None, "second reply from the same node in one round (replay) ignored"
        try:
            return cohort_blobs(r, asked[node]), None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return None, f"malformed reply: {str(exc)[:2000]}"
