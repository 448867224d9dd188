"""``LdpEncodeMod`` and ``LdpDecoding``: the client mod and the server wrapper, alone and together."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, Metadata, MetricRecord, RecordDict
from flwr.app.message.message import make_message
from flwr.common.constant import ErrorCode
from flwr.serverapp.strategy import FedAdam, FedAvg
from flwr.supercore.exit import ExitCode

from sstq_fl import wire
from sstq_fl.encoders import make_encoder
from sstq_fl.fl.round_draws import encoder_seeds
from sstq_fl.flower import WIRE_STYPE, LdpDecoding, LdpEncodeMod
from sstq_fl.flower.decoding import UNIFORM, EmptyRound, empty_round_cause
from sstq_fl.flower.mod import flatten, public_spec

D, T, PID, SEED = 12, 3, 5, 7
SPEC = "sstq-flat:b=4"


def _theta() -> ArrayRecord:
    return ArrayRecord({"w": Array(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)),
                        "b": Array(np.arange(4, dtype=np.float32))})


def _msg(arrays: ArrayRecord, config: dict[str, Any], node: int = 1, kind: str = MessageType.TRAIN) -> Message:
    md = Metadata(run_id=1, message_id=f"m{node}", src_node_id=0, dst_node_id=node, reply_to_message_id="",
                  group_id="", created_at=time.time(), ttl=600.0, message_type=kind)
    return make_message(md, content=RecordDict({"arrays": arrays, "config": ConfigRecord(config)}))


def _context(pid: int = PID) -> Context:
    return Context(run_id=1, node_id=100 + pid, node_config={"partition-id": pid, "num-partitions": 10}, state=RecordDict(),
                   run_config={})


def _trainer_step(g: np.ndarray, metrics: dict[str, Any] | None = None):
    """A ClientApp train handler whose local model is ``θ − g``."""
    def call_next(msg: Message, context: Context) -> Message:
        theta = flatten(msg.content["arrays"])  # type: ignore[arg-type]
        local, at = {}, 0
        for k, a in msg.content["arrays"].items():  # type: ignore[union-attr]
            n = a.numpy().size
            local[k] = Array((theta[at:at + n] - g[at:at + n]).reshape(a.numpy().shape))
            at += n
        return Message(RecordDict({"arrays": ArrayRecord(local), "metrics": MetricRecord(metrics or {"num-examples": 10})}),
                       reply_to=msg)
    return call_next


def _blob(reply: Message) -> bytes:
    arr = reply.content["arrays"]["ldp-message"]  # type: ignore[index]
    assert arr.stype == WIRE_STYPE
    return bytes(arr.data)


def test_the_mod_sends_the_encoders_message_of_the_pseudo_gradient():
    """Reproducible coins: the bytes are exactly what the encoder gives for ``g = θ − θ_local`` (as the engine)."""
    g = np.random.default_rng(0).normal(size=D).astype(np.float32) * 0.1
    mod = LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5, randomness="reproducible", frame_seed=SEED, seed=SEED)
    enc = make_encoder(SPEC, D, 2.0, radius=0.5, seed=SEED).for_round(T)  # the round's public frame
    reply = mod(_msg(_theta(), {"server-round": T, "ldp-fingerprint": enc.fingerprint}), _context(), _trainer_step(g))
    assert not reply.has_error() and list(reply.content.array_records) == ["arrays"]
    expect = wire.pack(enc, enc.encode(torch.from_numpy(g)[None], encoder_seeds(SEED, T, np.array([PID]))), round=T)[0]
    assert _blob(reply) == expect and len(expect) == wire.HEADER_BYTES + (enc.payload_bits() + 7) // 8
    assert dict(reply.content["metrics"]) == {}  # type: ignore[arg-type]  # by default only the message leaves


def test_secure_coins_are_fresh_per_message_and_ignore_the_seed():
    g = np.full(D, 0.05, np.float32)
    mod = LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5)  # secure by default
    blobs = {_blob(mod(_msg(_theta(), {"server-round": T}), _context(), _trainer_step(g))) for _ in range(12)}
    assert len(blobs) > 1  # a seeded coin would give one message


def test_the_mod_refuses_a_server_decoding_another_configuration_and_passes_other_messages():
    mod = LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5)
    reply = mod(_msg(_theta(), {"server-round": T, "ldp-fingerprint": 1, "ldp-encoder": "sqkr"}), _context(),
                _trainer_step(np.zeros(D, np.float32)))
    assert reply.has_error() and int(reply.error.code) == ErrorCode.MOD_FAILED_PRECONDITION
    assert "the server decodes sqkr but this client encodes sstq-flat" in str(reply.error.reason)
    ev = _msg(_theta(), {"server-round": T}, kind=MessageType.EVALUATE)
    assert mod(ev, _context(), lambda m, c: Message(RecordDict({"metrics": MetricRecord({"acc": 1.0})}), reply_to=m)
               ).content["metrics"]["acc"] == 1.0  # type: ignore[index]


def test_the_mod_refuses_a_reply_that_is_not_the_local_model():
    def other_keys(msg: Message, context: Context) -> Message:
        return Message(RecordDict({"arrays": ArrayRecord({"x": Array(np.zeros(3, np.float32))})}), reply_to=msg)

    reply = LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5)(_msg(_theta(), {"server-round": T}), _context(), other_keys)
    assert reply.has_error() and "keys of the one received" in str(reply.error.reason)
    with pytest.raises(ValueError, match="LDP epsilon must be positive"):
        LdpEncodeMod(SPEC, epsilon=-1.0, radius=0.5)


def test_metrics_are_kept_or_reduced_as_asked():
    g, m = np.zeros(D, np.float32), {"num-examples": 10, "train-loss": 0.3}
    keep = LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5, metrics="keep")(
        _msg(_theta(), {"server-round": T}), _context(), _trainer_step(g, m))
    only = LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5, metrics="num-examples")(
        _msg(_theta(), {"server-round": T}), _context(), _trainer_step(g, m))
    assert dict(keep.content["metrics"]) == m and dict(only.content["metrics"]) == {"num-examples": 10}  # type: ignore[arg-type]


class _Grid:
    """Nodes 1..n for the inner strategy's sampler; messages get ids as Flower's grids give them."""

    def __init__(self, n: int):
        self.n = n

    def get_node_ids(self) -> list[int]:
        return list(range(1, self.n + 1))


def _round(strategy: LdpDecoding, grads: dict[int, np.ndarray], mods: LdpEncodeMod) -> tuple[ArrayRecord | None, Any]:
    """One round: configure, each sampled node's ClientApp (mod + ``θ − g``) replies, aggregate."""
    msgs = list(strategy.configure_train(1, _theta(), ConfigRecord({}), _Grid(len(grads))))  # type: ignore[arg-type]
    replies = []
    for m in msgs:
        node = int(m.metadata.dst_node_id)
        m.metadata.__dict__["_message_id"] = f"m{node}"
        r = mods(m, _context(node), _trainer_step(grads[node]))
        replies.append(make_message(Metadata(run_id=1, message_id="", src_node_id=node, dst_node_id=0,
                                             reply_to_message_id=f"m{node}", group_id="", created_at=time.time(),
                                             ttl=600.0, message_type=MessageType.TRAIN),
                                    **({"error": r.error} if r.has_error() else {"content": r.content})))
    return strategy.aggregate_train(1, replies)


def test_the_wrapper_hands_the_inner_strategy_theta_minus_the_decoded_mean_and_charges_the_ledger(run_identity):
    grads = {n: np.random.default_rng(n).normal(size=D).astype(np.float32) * 0.05 for n in (1, 2, 3, 4)}
    mod = LdpEncodeMod("clean", epsilon=1.0, radius=10.0)  # exact: the decoded mean is the mean
    ldp = LdpDecoding(FedAvg(), encoder="clean", epsilon=1.0, radius=10.0)
    ldp.prepare(_theta(), 1)
    arrays, metrics = _round(ldp, grads, mod)
    assert arrays is not None
    mean = np.mean([grads[n] for n in grads], axis=0)
    assert np.allclose(flatten(arrays), flatten(_theta()) - mean, atol=1e-6)
    assert "epsilon-spent" in metrics and ldp.last["dropped"] == [] and sorted(ldp.last["senders"]) == [1, 2, 3, 4]

    private = LdpDecoding(FedAdam(eta=0.1), encoder=SPEC, epsilon=2.0, radius=0.5, server_cap=1.0)
    private.prepare(_theta(), 5)
    arrays, metrics = _round(private, grads, LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5))
    assert arrays is not None and np.all(np.isfinite(flatten(arrays)))
    assert metrics["epsilon-spent"] == pytest.approx(2.0, rel=1e-4) and private.joins == {1: 1, 2: 1, 3: 1, 4: 1}


def test_the_wrapper_leaves_out_a_client_without_a_message_and_a_foreign_one(run_identity):
    grads = {n: np.full(D, 0.01 * n, np.float32) for n in (1, 2, 3)}
    ldp = LdpDecoding(FedAvg(), encoder=SPEC, epsilon=2.0, radius=0.5)
    ldp.prepare(_theta(), 1)
    honest = LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5)
    other = LdpEncodeMod("sqkr", epsilon=2.0, radius=0.5)

    def mixed(msg: Message, context: Context, call_next: Any) -> Message:
        node = int(msg.metadata.dst_node_id)
        if node == 2:  # a plain client: no mod
            return call_next(msg, context)
        if node == 3:  # another encoder, and it ignores the server's fingerprint
            msg.content["config"].pop("ldp-fingerprint")  # type: ignore[union-attr]
            return other(msg, context, call_next)
        return honest(msg, context, call_next)

    _, _ = _round(ldp, grads, mixed)  # type: ignore[arg-type]
    reasons = {d["client"]: d["reason"] for d in ldp.last["dropped"]}
    assert "reply without an LDP message" in reasons[2] and "foreign message" in reasons[3]
    assert ldp.last["senders"] == [1]


def test_a_round_loop_of_its_own_records_every_round_without_a_plan(run_identity):
    """Without ``start`` (a caller's own loop), the ledger has no plan to exceed and charges each round."""
    grads = {n: np.full(D, 0.01, np.float32) for n in (1, 2)}
    ldp = LdpDecoding(FedAvg(), encoder=SPEC, epsilon=1.0, radius=0.5)
    for _ in range(3):
        _round(ldp, grads, LdpEncodeMod(SPEC, epsilon=1.0, radius=0.5))
    assert ldp.joins == {1: 3, 2: 3} and ldp.ledger is not None and ldp.ledger.plan is None
    assert ldp.ledger.epsilon(1e-5) == pytest.approx(3.0, rel=1e-3)


def _plain(msg: Message, context: Context, call_next: Any) -> Message:
    """A ClientApp without the mod: the local model goes back as it is."""
    return call_next(msg, context)


def test_a_round_without_a_valid_message_stops_the_server_with_its_cause(run_identity):
    grads = {n: np.full(D, 0.01, np.float32) for n in (1, 2)}
    ldp = LdpDecoding(FedAvg(), encoder=SPEC, epsilon=2.0, radius=0.5)
    ldp.prepare(_theta(), 2)  # two rounds sent: each charged before it leaves
    with pytest.raises(EmptyRound, match=r"^no LDP message in any reply of round 1: is LdpEncodeMod in the ClientApp's mods\?$"):
        _round(ldp, grads, _plain)  # type: ignore[arg-type]
    assert isinstance(EmptyRound("x"), ValueError) and EmptyRound.exit_code == ExitCode.SERVERAPP_STRATEGY_PRECONDITION_UNMET
    with pytest.raises(EmptyRound) as got:
        _round(ldp, grads, LdpEncodeMod("sqkr", epsilon=2.0, radius=0.5))
    cause = str(got.value)
    server, client = make_encoder(SPEC, D, 2.0, radius=0.5).for_round(1), make_encoder("sqkr", D, 2.0, radius=0.5).for_round(1)
    assert cause == (f"encoder mismatch in round 1: the server decodes {public_spec(server)} but this client encodes "
                     f"{public_spec(client)} (2 of 2 clients refused)")
    assert "\n" not in cause and len(cause) > 200


def test_allow_empty_rounds_tolerates_them(run_identity):
    grads = {n: np.full(D, 0.01, np.float32) for n in (1, 2)}
    ldp = LdpDecoding(FedAvg(), encoder=SPEC, epsilon=2.0, radius=0.5, allow_empty_rounds=True)
    ldp.prepare(_theta(), 1)
    assert _round(ldp, grads, _plain) == (None, None)  # type: ignore[arg-type]
    assert sorted(d["client"] for d in ldp.last["dropped"]) == [1, 2] and ldp.last["senders"] == []  # sampled in any order
    # one valid message is enough without the opt-out
    strict = LdpDecoding(FedAvg(), encoder=SPEC, epsilon=2.0, radius=0.5)
    strict.prepare(_theta(), 1)
    honest = LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5)
    arrays, _ = _round(strict, grads, lambda m, c, n: (honest if int(m.metadata.dst_node_id) == 1 else _plain)(m, c, n))
    assert arrays is not None and strict.last["senders"] == [1]


def test_the_causes_of_an_empty_round():
    enc = make_encoder(SPEC, D, 2.0, radius=0.5)
    late = {"client": 3, "reason": "no reply before the round timeout"}
    assert empty_round_cause(2, [late], enc) == "no reply in round 2: every asked client (1) timed out"
    foreign = {"client": 1, "reason": "foreign message: fingerprint 0x00000001 does not match encoder 'x' (0x2)"}
    assert empty_round_cause(2, [foreign, late], enc) == (f"encoder mismatch in round 2: {foreign['reason']}; "
                                                          f"the server decodes {public_spec(enc)}")
    other = {"client": 4, "reason": "malformed reply: message 0: truncated"}
    assert empty_round_cause(2, [late, other], enc) == ("no valid LDP message in round 2: 2 clients left out, client 4: "
                                                        "malformed reply: message 0: truncated")


def test_a_strategy_without_the_wrapper_stops_at_the_wire_message_naming_ldp_decoding(run_identity):
    """Plain FedAvg on the mod's replies: its validation passes (``num-examples`` = 1, a constant) and its
    average stops at the wire Array, whose stype names the wrapper (what ``flwr run`` shows as the cause)."""
    fedavg, mod = FedAvg(), LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5)
    msgs = list(fedavg.configure_train(1, _theta(), ConfigRecord({}), _Grid(2)))  # type: ignore[arg-type]
    replies = []
    for m in msgs:
        r = mod(m, _context(), _trainer_step(np.zeros(D, np.float32), {}))
        assert dict(r.content["metrics"]) == {"num-examples": 1}  # type: ignore[arg-type]
        replies.append(make_message(Metadata(run_id=1, message_id="", src_node_id=int(m.metadata.dst_node_id),
                                             dst_node_id=0, reply_to_message_id="", group_id="", created_at=time.time(),
                                             ttl=600.0, message_type=MessageType.TRAIN), content=r.content))
    with pytest.raises(TypeError, match="wrap the server's strategy in sstq_fl.flower.LdpDecoding"):
        fedavg.aggregate_train(1, replies)


def test_a_size_mod_after_the_mod_is_warned_about_once(caplog):
    from flwr.clientapp import ClientApp
    from flwr.clientapp.mod import arrays_size_mod, message_size_mod

    def handler(msg: Message, context: Context) -> Message:
        return _trainer_step(np.zeros(D, np.float32))(msg, context)

    for mods, warned in (([LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5), arrays_size_mod], True),
                         ([message_size_mod, LdpEncodeMod(SPEC, epsilon=2.0, radius=0.5)], False)):
        app = ClientApp(mods=mods)
        app.train()(handler)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sstq_fl.flower"):
            for _ in range(2):
                assert not app(_msg(_theta(), {"server-round": T}), _context()).has_error()
        hits = [r for r in caplog.records if "runs after LdpEncodeMod" in r.getMessage()]
        assert len(hits) == (1 if warned else 0), [r.getMessage() for r in caplog.records]
        if warned:
            assert "arrays_size_mod runs after LdpEncodeMod" in hits[0].getMessage()


def test_the_wrapper_says_it_weighs_uniformly_and_leaves_flowers_lines_as_they_are(flower_log, caplog):
    """Its own summary says how it averages; the inner strategy's summary is Flower's, unrewritten."""
    with caplog.at_level(logging.DEBUG, logger="sstq_fl"):
        LdpDecoding(FedAvg(), encoder=SPEC, epsilon=2.0, radius=0.5).summary()
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("sstq_fl")]
    assert any(s.startswith("LdpDecoding: encoder") and s.endswith(UNIFORM) for s in ours), ours
    assert "one LDP message, one vote" in UNIFORM
    assert any("Weighted by: 'num-examples'" in s for s in flower_log), flower_log  # Flower's own summary
