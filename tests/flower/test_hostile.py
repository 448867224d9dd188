"""Hostile input at the server: replies that Flower delivers to ``LdpDecoding(SstqSampling)``.

One round is driven by hand as ``sstq_fl.flower.apps.sstq_server.serve`` drives it: ``LdpDecoding.configure_train``
over a fake grid, ``aggregate_train`` on the replies, then :class:`~sstq_fl.flower.apps.sstq_server.RunRecorder`
(the ``evaluate_fn``) records the round.  An honest reply is what the project's ClientApp and
``LdpEncodeMod`` send: ``RecordDict({"arrays": ArrayRecord({"ldp-message": <wire Array>}),
"metrics": MetricRecord({"num-examples": batch})})`` (checked against the real ClientApp below).

Each hostile reply (a truncated, oversized, garbage, foreign, stale or out-of-range wire message;
a reply with no, or two, ArrayRecords, or an ArrayRecord without the one wire Array; an error, also
one the SuperLink returns for a node) must be left out with a logged reason, must not crash the
server, and must not reach the aggregate: the model after the round is exactly the one the honest
clients alone give, and the round's other record fields are the same.  Replays and nodes the round
did not ask are not counted twice; the partition → node map follows a SuperNode that restarts with
a new node id; ``_read`` and ``aggregate_train`` never raise whatever a reply holds.

Not here any more: the encoder-statistics cases of the old ``SstqFedAvg`` (a reply's ``stats`` not
JSON, not an object, not numbers, not finite).  Encoder statistics no longer cross the wire
(``diagnostics`` is refused on the Flower engine), so there is nothing left to validate; a reply's
ConfigRecords are ignored (fuzzed below).  Nor the partition id and round a reply used to declare:
a reply is attributed by its source node, and its round is the wire header's.

Client-reported metrics never weight anything: a NaN, infinite, negative or list-valued
``num-examples`` once crashed the server or turned θ into NaN through Flower's weighted averages;
:func:`test_hostile_metrics_neither_crash_the_server_nor_reach_the_model` keeps them out.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, Metadata, MetricRecord, RecordDict
from flwr.app.message.message import make_message
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from sstq_fl import wire
from sstq_fl.encoders import make_encoder
from sstq_fl.fl.engine import RoundState, RunConfig, Trainer
from sstq_fl.flower.apps.sstq_server import RunRecorder, SstqSampling
from sstq_fl.flower.decoding import LdpDecoding, wire_blob
from sstq_fl.flower.discovery import discover
from sstq_fl.flower.mod import WIRE_KEY, WIRE_STYPE, wire_array

NODES = {0: 1000, 1: 1001, 2: 1002}
T = 1
LOGGER = "sstq_fl.flower"


def _cfg(encoder: str) -> RunConfig:
    return RunConfig(task="lsq", dim=20, n=400, clients=3, batch=20, clip=1.0, lr=0.5, rounds=3, encoder=encoder,
                     engine="flower")


def _model(theta: torch.Tensor) -> ArrayRecord:
    """The model as ``serve`` sends it (``theta``, the trainer's dtype)."""
    return ArrayRecord({"theta": Array(np.ascontiguousarray(theta.numpy()))})


def _train_id(t: int, node: int) -> str:
    """The message id :class:`FakeGrid` gives round ``t``'s train message to ``node``."""
    return f"train-{t}-{node}"


class FakeGrid:
    """Just enough of Flower's ``Grid``: ids for pushed messages (train messages: :func:`_train_id`), and
    nodes that answer QUERY messages with their partition (discovery)."""

    def __init__(self, partitions: dict[int, int] | None = None, dead: set[int] = frozenset()):  # type: ignore[assignment]
        self.partitions = dict(partitions if partitions is not None else {n: c for c, n in NODES.items()})
        self.dead, self.asked = set(dead), []  # type: ignore[var-annotated]
        self._pending: dict[str, int] = {}
        self.pushed = 0

    def get_node_ids(self) -> list[int]:
        return [n for n in self.partitions if n not in self.dead]

    def push_messages(self, msgs: list[Message]) -> list[str]:
        ids = []
        for m in msgs:
            self.pushed += 1
            dst = m.metadata.dst_node_id
            ids.append(_train_id(int(m.metadata.group_id), dst) if m.metadata.message_type == MessageType.TRAIN
                       else f"m{self.pushed}")
            m.metadata.__dict__["_message_id"] = ids[-1]  # as Flower's grids do
            if m.metadata.message_type == MessageType.QUERY:
                self.asked.append(dst)
                self._pending[ids[-1]] = dst
        return ids

    def pull_messages(self, ids: list[str]) -> list[Message]:
        out = []
        for i in ids:
            node = self._pending.get(i)
            if node is not None and node not in self.dead:
                md = Metadata(run_id=1, message_id="", src_node_id=node, dst_node_id=0, reply_to_message_id=i,
                              group_id="", created_at=time.time(), ttl=60.0, message_type=MessageType.QUERY)
                out.append(make_message(md, RecordDict({"node": ConfigRecord({"partition-id": self.partitions[node]})})))
                del self._pending[i]
        return out


class Server:
    """``serve``'s objects for one run, driven one round at a time (needs the ``run_identity`` fixture)."""

    def __init__(self, tmp: Path, encoder: str, send_config: bool = False):
        self.tr = Trainer(_cfg(encoder))
        self.st: RoundState = self.tr.initial_state(tmp, False)
        cfg = self.tr.cfg
        self.inner = SstqSampling(self.tr, 0, 60.0, send_config)
        self.inner.nodes = dict(NODES)
        self.ldp = LdpDecoding(self.inner, cfg.encoder, cfg.epsilon, cfg.clip, frame_seed=cfg.seed,
                               server_cap=cfg.server_cap, delta=cfg.delta, ledger=self.tr.ledger,
                               identify=self.inner.client_of, allow_empty_rounds=True)  # as serve
        self.record = RunRecorder(self.tr, self.st, tmp, self.inner, self.ldp, False)
        assert self.st.theta is not None
        self.ldp.prepare(_model(self.st.theta), cfg.rounds)

    def configure(self, t: int, grid: FakeGrid) -> list[Message]:
        """Round ``t``'s train messages, pushed (so that they have ids)."""
        assert self.st.theta is not None
        msgs = list(self.ldp.configure_train(t, _model(self.st.theta), ConfigRecord({}), grid))  # type: ignore[arg-type]
        grid.push_messages(msgs)
        return msgs

    def aggregate(self, t: int, replies: list[Message]) -> dict[str, Any]:
        """Aggregate round ``t``'s replies and record the round (as Flower's ``Strategy.start``)."""
        assert self.st.theta is not None
        arrays, _ = self.ldp.aggregate_train(t, replies)
        self.record(t, arrays if arrays is not None else _model(self.st.theta))
        return self.st.rounds[-1]


def _round(tmp: Path, encoder: str, replies: list[Message]) -> tuple[dict[str, Any], torch.Tensor]:
    """Round ``T`` with ``replies``: the round's record and the model after it."""
    s = Server(tmp, encoder)
    s.configure(T, FakeGrid())
    rec = s.aggregate(T, replies)
    assert s.st.theta is not None
    return rec, s.st.theta


def _reply(node: int, content: RecordDict | None = None, error: Error | None = None, src: int | None = None,
           t: int = T) -> Message:
    """A reply to round ``t``'s train message to ``node`` (sent by ``src``, default ``node``)."""
    md = Metadata(run_id=1, message_id="", src_node_id=node if src is None else src, dst_node_id=0,
                  reply_to_message_id=_train_id(t, node), group_id=str(t), created_at=time.time(), ttl=600.0,
                  message_type=MessageType.TRAIN)
    return make_message(md, content=content, error=error)


def _wire(blob: bytes, num_examples: Any = 20) -> RecordDict:
    """An honest reply's content around ``blob`` (what ``LdpEncodeMod(metrics="num-examples")`` leaves)."""
    return RecordDict({"arrays": ArrayRecord({WIRE_KEY: wire_array(blob)}),
                       "metrics": MetricRecord({"num-examples": num_examples})})


@functools.lru_cache(maxsize=4)
def _honest(encoder: str, t: int = T) -> dict[int, bytes]:
    """Each client's wire message in round ``t`` from the initial model: the in-process engine's
    ``client_messages``, which are the project's ClientApp's (:func:`test_the_honest_replies_are_the_client_apps`)."""
    tr = Trainer(_cfg(encoder))
    theta = tr.task.init_params(tr.cfg.seed)
    return {c: tr.client_messages(theta, t, np.array([c]))[0][0] for c in NODES}


def _frame(encoder: str, values: dict[str, list[int]], rnd: int = T) -> bytes:
    """A well-framed message (right header) whose unsigned fields hold ``values``."""
    enc = make_encoder(encoder, 20, 3.0, radius=1.0, seed=0).for_round(rnd)
    bits: list[int] = []
    for f in enc.layout():
        for v in values[f.name]:
            bits += [(v >> (f.bits - 1 - i)) & 1 for i in range(f.bits)]
    body = np.packbits(np.array(bits + [0] * (-len(bits) % 8), np.uint8)).tobytes()
    return wire.HEADER.pack(wire.MAGIC, wire.VERSION, 0, enc.fingerprint, rnd, enc.payload_bits()) + body


_INVALID = {"vqsgd": "field 'v' out of range (must be < 40)", "sqkr": "repeats"}


def _values(encoder: str, ok: bool) -> dict[str, list[int]]:
    if encoder == "vqsgd":
        return {"v": [3 if ok else 63]}  # 2d = 40 vertices in 6 bits: 40..63 are invalid
    return {"idx": [1, 2, 3, 4] if ok else [5, 5, 5, 5], "bits": [0]}  # sqkr's k indices must be distinct


def _not_bytes(blob: bytes) -> ArrayRecord:
    """A wire Array whose data is not bytes (not from the wire: a Python object in the same process)."""
    rec = ArrayRecord({WIRE_KEY: wire_array(blob)})
    rec[WIRE_KEY].data = "a string"  # type: ignore[assignment]
    assert not isinstance(rec[WIRE_KEY].data, bytes)
    return rec


def _hostile_cases(encoder: str) -> dict[str, tuple[list[Message], str]]:
    """name → (the replies of clients 1 (hostile), 0 and 2 (honest), the reason expected for client 1)."""
    honest = _honest(encoder)
    good = honest[1]
    other = make_encoder("vqsgd" if encoder != "vqsgd" else "sqkr", 20, 3.0, radius=1.0, seed=0)
    foreign = wire.pack(other, other.encode(torch.ones(1, 20) / 20**0.5, [1]), round=T)[0]
    rng = np.random.default_rng(7)
    blob_cases: dict[str, tuple[bytes, str]] = {
        "truncated": (good[:-1], "truncated: payload has"),
        "header only": (good[:10], "shorter than the 16-byte header"),
        "empty": (b"", "truncated: 0 bytes is shorter than the 16-byte header"),
        "oversized": (good + bytes(4096), "oversized: payload has"),
        "garbage": (rng.integers(0, 256, 64, dtype=np.uint8).tobytes(), "bad magic"),
        "unknown encoder": (foreign, "foreign message: fingerprint"),
        "wrong round in the header": (_frame(encoder, _values(encoder, ok=True), rnd=T + 1), "message for round 2"),
        "flags": (good[:3] + b"\x80" + good[4:], "unknown header flags"),
        "version": (good[:2] + b"\x07" + good[3:], "unsupported wire version 7"),
        "declared bits": (good[:12] + (9999).to_bytes(4, "big") + good[16:], "declares 9999 payload bits"),
        "invalid fields": (_frame(encoder, _values(encoder, ok=False)), _INVALID[encoder]),
    }
    cases: dict[str, tuple[RecordDict, str]] = {name: (_wire(b), why) for name, (b, why) in blob_cases.items()}
    metrics = MetricRecord({"num-examples": 20})
    no_message = "malformed reply: reply without an LDP message"
    records: dict[str, tuple[dict[str, Any], str]] = {
        "no ArrayRecord": ({"metrics": metrics}, "malformed reply: reply holds 0 ArrayRecords"),
        "empty reply": ({}, "malformed reply: reply holds 0 ArrayRecords"),
        "two ArrayRecords": ({"arrays": ArrayRecord({WIRE_KEY: wire_array(good)}),
                              "more": ArrayRecord({WIRE_KEY: wire_array(good)}), "metrics": metrics},
                             "malformed reply: reply holds 2 ArrayRecords"),
        "the local model (no LdpEncodeMod)": ({"arrays": ArrayRecord({"theta": Array(np.zeros(20))}), "metrics": metrics},
                                              no_message),
        "an Array of another stype": ({"arrays": ArrayRecord({WIRE_KEY: Array(dtype="uint8", shape=(len(good),),
                                                                              stype="pickle", data=good)})}, no_message),
        "a numpy Array under the wire key": ({"arrays": ArrayRecord({WIRE_KEY: Array(np.frombuffer(good, np.uint8).copy())})},
                                             no_message),
        "the wire Array under another key": ({"arrays": ArrayRecord({"message": wire_array(good)})}, no_message),
        "the wire Array beside another Array": ({"arrays": ArrayRecord({WIRE_KEY: wire_array(good),
                                                                        "theta": Array(np.zeros(3))})}, no_message),
        "an empty ArrayRecord": ({"arrays": ArrayRecord()}, no_message),
        "wire Array data not bytes": ({"arrays": _not_bytes(good)}, no_message),
        "the message in a ConfigRecord (the old format)": (
            {"reply": ConfigRecord({"partition-id": 1, "round": T, "blob": good})},
            "malformed reply: reply holds 0 ArrayRecords"),
    }
    cases |= {name: (RecordDict(content), why) for name, (content, why) in records.items()}
    out = {name: [_reply(NODES[1], content)] for name, (content, _) in cases.items()}
    whys = {name: why for name, (_, why) in cases.items()}
    errors = {
        "client raised": (Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=""),
                          "client raised (code 2): no reason given", None),
        "the mod refused": (Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason="LdpEncodeMod: the server decodes x\ny"),
                            "client mod refused (code 6): LdpEncodeMod: the server decodes x", None),
        "node unavailable": (Error(code=ErrorCode.NODE_UNAVAILABLE, reason="gone\nmore"),
                             "node unavailable (missed its heartbeats): gone", None),
        "node unavailable, from the SuperLink": (Error(code=ErrorCode.NODE_UNAVAILABLE, reason="Error: Node Unavailable"),
                                                 "node unavailable (missed its heartbeats): Error: Node Unavailable",
                                                 SUPERLINK_NODE_ID),
        "client raised, with a reason": (Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason="boom"),
                                         "client raised (code 2): boom", None),
    }
    for name, (error, why, src) in errors.items():
        out[name] = [_reply(NODES[1], error=error, src=src)]
        whys[name] = why
    honest_rest = [_reply(NODES[c], _wire(honest[c])) for c in (0, 2)]
    return {name: (hostile + honest_rest, whys[name]) for name, hostile in out.items()}


KEYS = ("round", "train_loss", "distance_to_optimum", "epsilon_spent", "clients", "bits_per_client")


def _same_record(rec: dict[str, Any], ref: dict[str, Any], name: str) -> None:
    for k in KEYS:  # (θ* is recomputed per Trainer: LAPACK may differ in the last bit)
        assert rec[k] == (pytest.approx(ref[k], rel=1e-12) if isinstance(ref[k], float) else ref[k]), (name, k)


@functools.lru_cache(maxsize=4)
def _reference(tmp: Path, encoder: str) -> tuple[tuple[dict[str, Any], torch.Tensor], tuple[dict[str, Any], torch.Tensor]]:
    """(record, θ) of round ``T`` with the honest clients 0 and 2 only, and with all three."""
    honest = _honest(encoder)
    ref = _round(tmp / "ref", encoder, [_reply(NODES[c], _wire(honest[c])) for c in (0, 2)])
    everyone = _round(tmp / "all", encoder, [_reply(NODES[c], _wire(honest[c])) for c in (0, 1, 2)])
    return ref, everyone


def test_the_honest_replies_are_the_client_apps(tmp_path, run_identity):
    """The project's ClientApp (``train`` behind ``LdpEncodeMod``, reproducible mode) on the server's own
    train messages replies exactly ``_wire(_honest(...)[c])``, and those replies all count."""
    from sstq_fl.flower import LdpEncodeMod
    from sstq_fl.flower.apps.sstq_client import ldp_settings, train

    s = Server(tmp_path, "sqkr", send_config=True)  # the run config travels in the message, as in-process
    msgs = s.configure(T, FakeGrid())
    mod = LdpEncodeMod(settings=ldp_settings, metrics="num-examples")
    replies = []
    for m in msgs:
        c = s.inner.client_of(m.metadata.dst_node_id)
        context = Context(run_id=1, node_id=m.metadata.dst_node_id, node_config={"partition-id": c}, state=RecordDict(),
                          run_config={})
        r = mod(m, context, train)
        assert not r.has_error() and r.metadata.src_node_id == NODES[c]
        assert r.metadata.reply_to_message_id == _train_id(T, NODES[c])
        assert list(r.content.keys()) == ["arrays", "metrics"] and dict(r.content["metrics"]) == {"num-examples": 20}
        assert wire_blob(r) == ("arrays", _honest("sqkr")[c])
        replies.append(r)
    rec = s.aggregate(T, replies)
    assert rec["dropped"] == [] and rec["clients"] == 3 and s.ldp.last["senders"] == [0, 1, 2]


@pytest.mark.parametrize("encoder", ["sqkr", "vqsgd"])
def test_hostile_replies_are_rejected_logged_and_kept_out_of_the_aggregate(tmp_path, caplog, run_identity, encoder):
    (ref, theta_ref), (_, theta_all) = _reference(tmp_path, encoder)
    assert ref["dropped"] == [{"client": 1, "reason": "no reply before the round timeout"}]
    assert not torch.equal(theta_all, theta_ref)  # client 1's message does move the model

    cases = _hostile_cases(encoder)
    assert len(cases) == 27
    for i, (name, (replies, why)) in enumerate(cases.items()):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            rec, theta = _round(tmp_path / f"case{i}", encoder, replies)
        assert [d["client"] for d in rec["dropped"]] == [1], (name, rec["dropped"])
        assert why in rec["dropped"][0]["reason"], (name, rec["dropped"][0]["reason"])
        assert any(f"round {T}: client 1 left out: {rec['dropped'][0]['reason']}" == r.getMessage() and r.name == LOGGER
                   for r in caplog.records), name
        assert torch.equal(theta, theta_ref), name  # the hostile reply did not reach the aggregate
        _same_record(rec, ref, name)


def test_replays_and_strangers_do_not_count_twice(tmp_path, caplog, run_identity):
    honest = _honest("sqkr")
    replies = [_reply(NODES[c], _wire(honest[c])) for c in (0, 1, 2)]
    (_, _), (ref, theta_ref) = _reference(tmp_path, "sqkr")
    # the same reply of client 0 delivered again, a stranger node sending client 0's message, a second reply
    # from client 2 carrying a previous round's message, a SuperLink error about a message this round did not
    # send: all left out, nothing counted twice (a previous round's message as a client's only reply: "wrong
    # round in the header" above)
    stale = _frame("sqkr", _values("sqkr", ok=True), rnd=T - 1)
    unknown = _reply(NODES[1], error=Error(code=ErrorCode.MESSAGE_UNAVAILABLE, reason="expired"), src=SUPERLINK_NODE_ID,
                     t=T + 5)
    extra = [_reply(NODES[0], _wire(honest[0])), _reply(4242, _wire(honest[0])), _reply(NODES[2], _wire(stale)), unknown]
    s = Server(tmp_path / "replay", "sqkr")
    s.configure(T, FakeGrid())
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rec = s.aggregate(T, replies + extra)
    assert torch.equal(s.st.theta, theta_ref)
    replay = "second reply from the same client in one round (replay) ignored"
    assert sorted((d["client"], d["reason"]) for d in rec["dropped"]) == [
        (-1, "message unavailable (expired before the node pulled it): expired"),
        (-1, "reply from node 4242, which this round did not ask"), (0, replay), (2, replay)]
    for d in rec["dropped"]:
        assert any(f"client {d['client']} left out: {d['reason']}" in r.getMessage() for r in caplog.records), d
    assert s.ldp.last["senders"] == [0, 1, 2] and s.ldp.joins == {0: 1, 1: 1, 2: 1}  # the stranger is charged nothing
    assert list(s.st.joins) == [1, 1, 1]
    _same_record(rec, ref, "replay")


def test_discovery_ignores_dead_and_bogus_nodes(run_identity):
    grid = FakeGrid({1000: 0, 1001: 1, 1002: 2, 1003: 7, 1004: 1}, dead={1004})
    t0 = time.time()
    assert discover(grid, 3, timeout=5.0) == {0: 1000, 1: 1001, 2: 1002}  # type: ignore[arg-type]  # 1003: no such partition
    assert time.time() - t0 < 2.0


def test_discovery_keeps_the_first_claim_of_a_partition(caplog, run_identity):
    grid = FakeGrid({1000: 0, 1001: 1, 1002: 1, 1003: 2})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        found = discover(grid, 3, timeout=5.0)  # type: ignore[arg-type]
    assert found in ({0: 1000, 1: 1001, 2: 1003}, {0: 1000, 1: 1002, 2: 1003})  # whichever answered first
    assert f"node {({1001, 1002} - {found[1]}).pop()} claims partition 1 (invalid or already claimed by node {found[1]})" \
        in caplog.text


def test_a_restarted_supernode_is_remapped_and_dead_nodes_get_no_message(tmp_path, caplog, run_identity):
    s = Server(tmp_path, "sqkr")
    grid = FakeGrid()
    assert s.inner.refresh_nodes(grid) == {1000, 1001, 1002} and grid.asked == []  # nothing changed: nobody is asked
    # round 1: node 1001 crashed (still listed until its heartbeats expire): no reply, so partition 1 is silent
    assert sorted(m.metadata.dst_node_id for m in s.configure(1, grid)) == [1000, 1001, 1002]
    rec = s.aggregate(1, [_reply(NODES[c], _wire(_honest("sqkr", 1)[c]), t=1) for c in (0, 2)])
    assert rec["dropped"] == [{"client": 1, "reason": "no reply before the round timeout"}] and s.inner.silent == {1}
    # round 2: partition 1 restarted as node 2001: only the new node is asked, and it gets partition 1's message
    grid.partitions[2001] = 1
    with caplog.at_level(logging.WARNING, logger="sstq_fl.fl"):
        msgs = s.configure(2, grid)
    assert grid.asked == [2001] and s.inner.nodes == {0: 1000, 1: 2001, 2: 1002}
    assert "partition 1 is now served by node 2001 (was node 1001)" in caplog.text
    assert sorted(m.metadata.dst_node_id for m in msgs) == [1000, 1002, 2001] and s.inner.unreachable == []
    blobs = Trainer(_cfg("sqkr")).client_messages(s.st.theta, 2, np.arange(3))[0]
    late = _reply(1001, _wire(blobs[1]), t=2)  # the old node, back from the dead: a node this round did not ask
    rec = s.aggregate(2, [_reply(NODES[0], _wire(blobs[0]), t=2), _reply(2001, _wire(blobs[1]), t=2), late,
                          _reply(NODES[2], _wire(blobs[2]), t=2)])
    assert rec["dropped"] == [{"client": -1, "reason": "reply from node 1001, which this round did not ask"}]
    # client 1: asked in round 1, charged
    assert s.ldp.last["senders"] == [0, 1, 2] and s.inner.silent == set() and list(s.st.joins) == [2, 2, 2]
    # round 3: partition 2's node is gone and nobody took its place: no message to it, and it is recorded as such
    grid.dead = {1001, 1002}
    msgs = s.configure(3, grid)
    assert sorted(m.metadata.dst_node_id for m in msgs) == [1000, 2001] and s.inner.unreachable == [2]
    assert grid.asked == [2001]  # no new node: nobody asked
    blobs = Trainer(_cfg("sqkr")).client_messages(s.st.theta, 3, np.arange(2))[0]
    rec = s.aggregate(3, [_reply(NODES[0], _wire(blobs[0]), t=3), _reply(2001, _wire(blobs[1]), t=3)])
    assert rec["dropped"] == [{"client": 2, "reason": "node not connected"}] and rec["clients"] == 3
    assert list(s.st.joins) == [3, 3, 2]  # client 2's node not connected: never asked, not charged


def test_errors_the_superlink_returns_for_a_node_count_for_that_node(tmp_path, run_identity):
    """Flower's SuperLink answers for a node that stopped heartbeating: the error comes from the SuperLink
    and answers the message sent to that node; the node is then silent (re-mapped if a new node joins)."""
    honest = _honest("sqkr")
    s = Server(tmp_path, "sqkr")
    msgs = s.configure(T, FakeGrid())
    to_1 = next(m for m in msgs if m.metadata.dst_node_id == NODES[1])
    md = Metadata(run_id=1, message_id="", src_node_id=SUPERLINK_NODE_ID, dst_node_id=SUPERLINK_NODE_ID,
                  reply_to_message_id=to_1.metadata.message_id, group_id=str(T), created_at=time.time(), ttl=60.0,
                  message_type=MessageType.TRAIN)
    gone = make_message(md, error=Error(code=ErrorCode.NODE_UNAVAILABLE, reason="Error: Node Unavailable"))
    rec = s.aggregate(T, [_reply(NODES[0], _wire(honest[0])), gone, _reply(NODES[2], _wire(honest[2]))])
    assert rec["dropped"] == [{"client": 1, "reason": "node unavailable (missed its heartbeats): Error: Node Unavailable"}]
    assert s.ldp.last["silent"] == [1] and s.inner.silent == {1}
    (_, theta_ref), _ = _reference(tmp_path, "sqkr")
    assert torch.equal(s.st.theta, theta_ref)


@pytest.mark.parametrize("name, metrics", [
    ("missing", {}), ("no MetricRecord", None), ("zero", {"num-examples": 0}), ("huge", {"num-examples": 1e300}),
    ("another metric", {"num-examples": 20, "loss": 3.0}),
    ("nan", {"num-examples": math.nan}), ("inf", {"num-examples": math.inf}),
    ("cancels the others", {"num-examples": -40}), ("a list", {"num-examples": [1.0, 2.0]}),
    ("a list metric of another length", {"num-examples": 20, "loss": [1.0, 2.0]}),
])
def test_hostile_metrics_neither_crash_the_server_nor_reach_the_model(tmp_path, run_identity, name, metrics):
    """A valid wire message with hostile metrics: one ε-LDP message is one vote whatever the client claims,
    so the model is the one all three messages give (or, at worst, the honest clients' alone)."""
    honest = _honest("sqkr")
    (_, theta_ref), (_, theta_all) = _reference(tmp_path, "sqkr")
    content = RecordDict({"arrays": ArrayRecord({WIRE_KEY: wire_array(honest[1])})})
    if metrics is not None:
        content["metrics"] = MetricRecord(metrics)
    others = {"num-examples": 20, "loss": [1.0]} if name == "a list metric of another length" else {"num-examples": 20}
    replies = [_reply(NODES[c], RecordDict({"arrays": ArrayRecord({WIRE_KEY: wire_array(honest[c])}),
                                            "metrics": MetricRecord(others)})) for c in (0, 2)]
    rec, theta = _round(tmp_path / "case", "sqkr", [replies[0], _reply(NODES[1], content), replies[1]])
    assert bool(torch.isfinite(theta).all())
    assert torch.equal(theta, theta_all) or (torch.equal(theta, theta_ref) and [d["client"] for d in rec["dropped"]] == [1])


# ------------------------------------------------------------------ fuzz: whatever a reply holds
_BYTES = st.one_of(st.binary(max_size=64), st.sampled_from(sorted(_honest("sqkr").values())),
                   st.builds(lambda b, i, x: b[:i] + bytes([x]) + b[i + 1:], st.sampled_from(sorted(_honest("sqkr").values())),
                             st.integers(0, 30), st.integers(0, 255)))
_ARRAY = st.one_of(
    _BYTES.map(wire_array),
    st.builds(lambda d, s, t: Array(dtype=d, shape=s, stype=t, data=b"\x00" * 4),
              st.sampled_from(["uint8", "float32", "x"]), st.tuples(st.integers(0, 4)),
              st.sampled_from([WIRE_STYPE, "numpy.ndarray", "pickle", ""])),
    st.builds(lambda b, t, d: Array(dtype=d, shape=(len(b),), stype=t, data=b), _BYTES,
              st.sampled_from([WIRE_STYPE, "numpy.ndarray", WIRE_STYPE + "x"]), st.sampled_from(["uint8", "<f4", "object"])),
    st.lists(st.floats(allow_nan=True, width=32), max_size=5).map(lambda v: Array(np.asarray(v, np.float32))),
)
_ARRAY_RECORD = st.dictionaries(st.sampled_from([WIRE_KEY, "theta", "x", ""]), _ARRAY, max_size=3).map(ArrayRecord)
_SCALAR = st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True))
_METRIC_RECORD = st.dictionaries(st.sampled_from(["num-examples", "loss", "x"]),
                                 st.one_of(_SCALAR, st.lists(st.floats(allow_nan=True), max_size=3)),
                                 max_size=3).map(MetricRecord)
_CONFIG_RECORD = st.dictionaries(st.sampled_from(["partition-id", "round", "blob", "server-round", "x"]),
                                 st.one_of(_SCALAR, st.text(max_size=20), _BYTES, st.booleans()), max_size=4).map(ConfigRecord)
_CONTENT = st.dictionaries(st.sampled_from(["arrays", "metrics", "config", "reply", "more"]),
                           st.one_of(_ARRAY_RECORD, _METRIC_RECORD, _CONFIG_RECORD), max_size=4).map(RecordDict)
_WIRE_REPLY = st.builds(lambda b, more: {"arrays": ArrayRecord({WIRE_KEY: wire_array(b)}), **more}, _BYTES,
                        st.dictionaries(st.sampled_from(["config", "reply"]), _CONFIG_RECORD, max_size=1))
_ERROR = st.builds(lambda code, reason: Error(code=code, reason=reason), st.integers(0, 9), st.text(max_size=30))
_SRC = st.sampled_from([NODES[1], NODES[0], 4242, SUPERLINK_NODE_ID, -1, 2**63])


@functools.lru_cache(maxsize=1)
def _fuzz_setup() -> tuple[Trainer, ArrayRecord]:
    tr = Trainer(_cfg("sqkr"))
    return tr, _model(tr.task.init_params(tr.cfg.seed))


def _fuzz_decoder() -> tuple[LdpDecoding, SstqSampling]:
    """``LdpDecoding(SstqSampling)`` in round ``T`` after its train messages went to the three nodes (as
    ``configure_train``, which needs a run identity, leaves it); its own ledger."""
    tr, model = _fuzz_setup()
    cfg = tr.cfg
    inner = SstqSampling(tr, 0, 60.0)
    inner.nodes, inner.current_arrays = dict(NODES), model
    ldp = LdpDecoding(inner, cfg.encoder, cfg.epsilon, cfg.clip, frame_seed=cfg.seed, server_cap=cfg.server_cap,
                      delta=cfg.delta, identify=inner.client_of, allow_empty_rounds=True)  # as serve
    ldp.prepare(model, cfg.rounds)
    ldp._global, ldp._round = model, T
    ldp._sent = [make_message(Metadata(run_id=1, message_id=_train_id(T, n), src_node_id=0, dst_node_id=n,
                                       reply_to_message_id="", group_id=str(T), created_at=time.time(), ttl=600.0,
                                       message_type=MessageType.TRAIN), content=RecordDict()) for n in NODES.values()]
    return ldp, inner


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=st.one_of(_CONTENT, _WIRE_REPLY.map(RecordDict)), error=st.one_of(st.none(), _ERROR), src=_SRC)
@example(content=RecordDict({"arrays": _not_bytes(b"x")}), error=None, src=NODES[1])
@example(content=RecordDict({"reply": ConfigRecord({"partition-id": math.inf})}), error=None, src=NODES[1])
def test_read_never_raises(content, error, src):
    ldp, _ = _fuzz_decoder()
    r = _reply(NODES[1], None if error else content, error, src=src)
    nodes, blobs, kept, dropped = ldp._read([r])
    event(f"reply kept: {bool(nodes)}")
    assert len(nodes) == len(blobs) == len(kept) <= 1
    assert all(isinstance(b, bytes) for b in blobs)
    assert all(isinstance(d["client"], int) and isinstance(d["reason"], str) and d["reason"] for d in dropped)
    node = NODES[1] if error is not None and src == SUPERLINK_NODE_ID else src  # the SuperLink answers for node 1001
    assert nodes in ([], [node]) and (not nodes or node in NODES.values())
    late = [c for c, n in NODES.items() if n != node]
    assert dropped[len(dropped) - len(late):] == [{"client": c, "reason": "no reply before the round timeout"} for c in late]
    assert len(dropped) == len(late) + (0 if nodes else 1)  # the reply left out has one reason


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(records=st.one_of(st.dictionaries(st.sampled_from(["arrays", "config", "reply", "more"]),
                                         st.one_of(_ARRAY_RECORD, _CONFIG_RECORD), max_size=3), _WIRE_REPLY),
       error=st.one_of(st.none(), _ERROR), src=_SRC)
@example(records={"arrays": ArrayRecord({WIRE_KEY: wire_array(_honest("sqkr")[1])})}, error=None, src=NODES[1])
def test_aggregate_train_never_raises_and_only_a_valid_message_moves_the_model(run_identity, records, error, src):
    """Client 1's reply holds anything (with the honest metrics), clients 0 and 2 are honest: the round
    aggregates, and the model is the honest clients' alone unless client 1's message was valid."""
    honest = _honest("sqkr")
    ldp, _ = _fuzz_decoder()
    hostile = _reply(NODES[1], None if error else RecordDict({**records, "metrics": MetricRecord({"num-examples": 20})}),
                     error, src=src)
    replies = [_reply(NODES[c], _wire(honest[c])) for c in (0, 2)]
    arrays, metrics = ldp.aggregate_train(T, [replies[0], hostile, replies[1]])
    assert arrays is not None and metrics is not None
    theta = np.asarray(arrays["theta"].numpy())
    assert np.isfinite(theta).all()
    event(f"client 1 counted: {1 in ldp.last['senders']}")
    if 1 in ldp.last["senders"]:  # a valid message (the honest one, or a valid mutation): it alone counts, as a clean reply
        assert ldp.last["senders"] == [0, 1, 2] and ldp.last["dropped"] == []
        expected = _fuzz_aggregate((honest[0], wire_blob(hostile)[1], honest[2]))
    else:
        clients = sorted(d["client"] for d in ldp.last["dropped"])  # client 1 (its reply, or no reply), and whoever
        assert ldp.last["senders"] == [0, 2] and clients in ([1], [-1, 1], [0, 1])  # sent this reply: a stranger, client 0
        expected = _fuzz_aggregate((honest[0], honest[2]))
    assert np.array_equal(theta, expected)


@functools.lru_cache(maxsize=64)
def _fuzz_aggregate(blobs: tuple[bytes, ...]) -> np.ndarray:
    """θ after round ``T`` from clean replies of clients 0, 1, 2 (or 0 and 2) with ``blobs``."""
    ldp, _ = _fuzz_decoder()
    nodes = list(NODES.values()) if len(blobs) == 3 else [NODES[0], NODES[2]]
    arrays, _ = ldp.aggregate_train(T, [_reply(n, _wire(b)) for n, b in zip(nodes, blobs, strict=True)])
    assert arrays is not None
    return np.asarray(arrays["theta"].numpy())


def test_the_fuzz_decoder_is_the_servers(tmp_path, run_identity):
    """The fuzz's hand-set decoder aggregates round ``T`` exactly as the one ``configure_train`` sets up."""
    (_, theta_ref), (_, theta_all) = _reference(tmp_path, "sqkr")
    honest = _honest("sqkr")
    assert np.array_equal(_fuzz_aggregate((honest[0], honest[2])), theta_ref.numpy())
    assert np.array_equal(_fuzz_aggregate((honest[0], honest[1], honest[2])), theta_all.numpy())
