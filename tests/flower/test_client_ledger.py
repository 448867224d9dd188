"""The client-side ledger: each client counts what it spends and refuses past its budget."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, Metadata, MetricRecord, RecordDict
from flwr.app.message.message import make_message
from flwr.common.constant import ErrorCode
from flwr.serverapp.strategy import FedAvg

from sstq_fl.flower import LdpDecoding, LdpEncodeMod, LdpSettings
from sstq_fl.flower import client_ledger as cl
from sstq_fl.flower.cohort import CohortDecoding
from sstq_fl.flower.mod import flatten
from sstq_fl.privacy.events import PureDpEvent
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.pure_composition import pure_composition_epsilon

D, EPS, DELTA, SPEC = 12, 2.0, 1e-5, "sstq-flat:b=4"


def _theta() -> ArrayRecord:
    return ArrayRecord({"w": Array(np.linspace(-1, 1, D, dtype=np.float32))})


def _msg(t: int, node: int = 1, config: dict[str, Any] | None = None) -> Message:
    md = Metadata(run_id=1, message_id=f"m{node}", src_node_id=0, dst_node_id=node, reply_to_message_id="",
                  group_id="", created_at=time.time(), ttl=600.0, message_type=MessageType.TRAIN)
    conf = ConfigRecord({"server-round": t, **(config or {})})
    return make_message(md, content=RecordDict({"arrays": _theta(), "config": conf}))


def _context(pid: int = 3, **node: Any) -> Context:
    return Context(run_id=1, node_id=100 + pid, node_config={"partition-id": pid, **node}, state=RecordDict(),
                   run_config={})


class _Handler:
    """A train handler replying ``θ − g``; counts its calls."""

    def __init__(self, fail: bool = False):
        self.calls, self.fail = 0, fail

    def __call__(self, msg: Message, context: Context) -> Message:
        self.calls += 1
        if self.fail:
            raise RuntimeError("the handler failed")
        local = flatten(msg.content["arrays"]) - 0.01  # type: ignore[arg-type]
        return Message(RecordDict({"arrays": ArrayRecord({"w": Array(local.astype(np.float32))}),
                                   "metrics": MetricRecord({"num-examples": 4})}), reply_to=msg)


def _mod(budget: float = 0.0) -> LdpEncodeMod:
    return LdpEncodeMod(SPEC, epsilon=EPS, radius=0.5, randomness="reproducible", budget_epsilon=budget,
                        budget_delta=DELTA)


def test_each_message_is_charged_in_the_nodes_state_as_json(run_identity):
    mod, ctx, handler = _mod(), _context(), _Handler()
    for t in (1, 2, 3):
        assert not mod(_msg(t), ctx, handler).has_error()
    rep = LdpEncodeMod.report(ctx, DELTA)
    assert rep["client"] == 3 and rep["messages"] == 3 and rep["budgets"] == []
    assert rep["epsilon"] == pytest.approx(pure_composition_epsilon(EPS, 3, DELTA), rel=1e-12)
    doc = json.loads(str(ctx.state.config_records[cl.STATE_KEY]["client:3"]))  # records and JSON, no pickle
    assert doc["format"] == cl.FORMAT and doc["events"] == [{"event": {"kind": "pure_dp", "epsilon": EPS,
                                                                       "relation": "replace_one"}, "count": 3}]
    assert cl.clients_in_state(ctx) == [3]


def test_the_client_ledger_composes_as_the_servers(run_identity):
    """Same accountant: the client's ε after R messages is the server ledger's for a client with R messages."""
    mod, ctx = _mod(), _context()
    server = PrivacyLedger("replace_one")
    for t in range(1, 6):
        mod(_msg(t), ctx, _Handler())
        server.record(PureDpEvent(EPS))
        assert cl.load(ctx, 3).report(DELTA)["epsilon"] == server.epsilon(DELTA)


def test_past_its_budget_the_client_refuses_before_training_and_charges_nothing(run_identity):
    budget = pure_composition_epsilon(EPS, 2, DELTA)  # exactly two messages
    mod, ctx, handler = _mod(budget), _context(), _Handler()
    assert not mod(_msg(1), ctx, handler).has_error() and not mod(_msg(2), ctx, handler).has_error()
    refused = mod(_msg(3), ctx, handler)
    assert refused.has_error() and refused.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    assert refused.error.reason.startswith(f"LdpEncodeMod: {cl.BUDGET_SPENT}client 3 has sent 2 messages")
    assert "\n" not in refused.error.reason and handler.calls == 2  # refused before the handler ran
    assert cl.load(ctx, 3).messages == 2
    assert mod(_msg(4), ctx, handler).has_error()  # stays refused: the rule reads only the count and the budget


def test_a_failed_or_refused_round_charges_nothing(run_identity):
    mod, ctx = _mod(), _context()
    with pytest.raises(RuntimeError):
        mod(_msg(1), ctx, _Handler(fail=True))  # the handler's own exception: Flower turns it into an error reply
    error = Message(Error(code=0, reason="the app answered with an error"), reply_to=_msg(1))
    assert mod(_msg(1), ctx, lambda msg, context: error) is error
    mismatch = mod(_msg(1, config={"ldp-fingerprint": 1}), ctx, _Handler())
    assert mismatch.has_error() and "encoder mismatch" in mismatch.error.reason
    assert cl.load(ctx, 3).messages == 0 and cl.STATE_KEY not in ctx.state.config_records


def test_the_node_operators_budget_holds_whatever_the_mod_says(run_identity):
    """node config client-budget-epsilon: set on the SuperNode, out of the server's reach."""
    one = pure_composition_epsilon(EPS, 1, 1e-6)
    mod, ctx = _mod(budget=100.0), _context(**{"client-budget-epsilon": one, "client-budget-delta": 1e-6})
    assert not mod(_msg(1), ctx, _Handler()).has_error()
    r = mod(_msg(2), ctx, _Handler())
    assert r.has_error() and f"over its budget epsilon={one:g}" in r.error.reason
    assert LdpEncodeMod.report(ctx, DELTA)["budgets"] == [{"epsilon": one, "delta": 1e-6}]


def test_the_ledger_file_outlives_the_nodes_state(run_identity, tmp_path):
    mod, ctx = _mod(), _context(**{"ledger-dir": str(tmp_path)})
    for t in (1, 2):
        mod(_msg(t), ctx, _Handler())
    assert json.loads((tmp_path / "client-ledger-3.json").read_text())["messages"] == 2
    fresh = _context(**{"ledger-dir": str(tmp_path)})  # a restarted SuperNode: empty state, same directory
    mod(_msg(3), fresh, _Handler())
    assert LdpEncodeMod.report(fresh, DELTA)["messages"] == 3
    (tmp_path / "client-ledger-3.json").write_text("{not json")
    r = mod(_msg(4), fresh, _Handler())
    assert r.has_error() and "client ledger of client 3 cannot be read" in r.error.reason  # no ledger, no message


def test_a_tampered_state_is_a_refusal_not_a_fresh_ledger(run_identity):
    mod, ctx = _mod(), _context()
    mod(_msg(1), ctx, _Handler())
    ctx.state.config_records[cl.STATE_KEY]["client:3"] = json.dumps({"format": cl.FORMAT, "client": 4})
    r = mod(_msg(2), ctx, _Handler())
    assert r.has_error() and "cannot be read" in r.error.reason
    one = cl.ClientLedger(3)
    one.charge(PureDpEvent(EPS))
    ctx.state.config_records[cl.STATE_KEY]["client:3"] = json.dumps({**one.to_json(), "messages": 0})
    r = mod(_msg(2), ctx, _Handler())
    assert r.has_error() and r.error.reason.endswith("cannot be read: it counts 0 messages but holds 1 events")
    bad = mod(_msg(2), _context(**{"client-budget-epsilon": "lots"}), _Handler())
    assert bad.has_error() and bad.error.reason == "LdpEncodeMod: node config client-budget-epsilon must be a number, got 'lots'"


def test_settings_refuse_a_bad_budget():
    with pytest.raises(ValueError, match="client budget epsilon"):
        LdpSettings(SPEC, EPS, 0.5, budget_epsilon=float("inf"))
    with pytest.raises(ValueError, match="client budget delta"):
        LdpSettings(SPEC, EPS, 0.5, budget_epsilon=1.0, budget_delta=1.0)


class _Grid:
    def __init__(self, n: int):
        self.n = n

    def get_node_ids(self) -> list[int]:
        return list(range(1, self.n + 1))


def _round(strategy: LdpDecoding, mod: LdpEncodeMod, contexts: dict[int, Context]) -> Any:
    """One round: configure, each node's mod (its own persistent context) replies, aggregate."""
    msgs = list(strategy.configure_train(1, _theta(), ConfigRecord({}), _Grid(len(contexts))))  # type: ignore[arg-type]
    replies = []
    for m in msgs:
        node = int(m.metadata.dst_node_id)
        m.metadata.__dict__["_message_id"] = f"m{node}"
        r = mod(m, contexts[node], _Handler())
        md = Metadata(run_id=1, message_id="", src_node_id=node, dst_node_id=0, reply_to_message_id=f"m{node}",
                      group_id="", created_at=time.time(), ttl=600.0, message_type=MessageType.TRAIN)
        replies.append(make_message(md, **({"error": r.error} if r.has_error() else {"content": r.content})))
    return strategy.aggregate_train(1, replies)


def test_the_server_leaves_a_refusing_client_out_with_its_reason_and_the_ledgers_agree(run_identity):
    """The server charges every asked client before its message leaves: its ledger is the client's while the
    client sends, an upper bound once it refuses."""
    budget = pure_composition_epsilon(EPS, 2, DELTA)
    strategy = LdpDecoding(FedAvg(fraction_evaluate=0.0), SPEC, EPS, 0.5, allow_empty_rounds=True)
    strategy.prepare(_theta(), None)
    contexts = {n: _context(n) for n in (1, 2, 3)}
    contexts[3] = _context(3, **{"client-budget-epsilon": pure_composition_epsilon(EPS, 1, DELTA)})
    mod = LdpEncodeMod(SPEC, epsilon=EPS, radius=0.5, budget_epsilon=budget, budget_delta=DELTA)  # secure coins
    for _ in range(3):
        _round(strategy, mod, contexts)
        server = {c: PrivacyLedger() for c in strategy.joins}
        for c, n in strategy.joins.items():
            server[c].record(PureDpEvent(EPS), n)
        for c in contexts:
            assert LdpEncodeMod.report(contexts[c], DELTA)["epsilon"] == pytest.approx(
                min(server[c].epsilon(DELTA), budget if c < 3 else pure_composition_epsilon(EPS, 1, DELTA)), rel=1e-12)
    assert strategy.joins == {1: 3, 2: 3, 3: 3}
    dropped = strategy.last["dropped"]
    assert sorted(d["client"] for d in dropped) == [1, 2, 3] and all(cl.BUDGET_SPENT in d["reason"] for d in dropped)
    assert dropped[0]["reason"].startswith("client mod refused (code 6): LdpEncodeMod: client budget spent")
    assert strategy.ledger is not None and strategy.ledger.epsilon(DELTA) == pytest.approx(
        pure_composition_epsilon(EPS, 3, DELTA), rel=1e-12)


def test_each_virtual_client_of_a_cohort_node_keeps_its_own_ledger_and_refusal(run_identity):
    """Node 1 hosts clients 10..19; client 11 has spent its budget: no message, its reason reaches the server."""
    from sstq_fl.fl.engine import RunConfig
    from sstq_fl.flower.apps.sstq_client import cohort

    from .test_cohort import CFG, T, _reply, _Sent
    from .test_cohort import _context as cohort_context
    from .test_cohort import _msg as cohort_msg

    one = pure_composition_epsilon(3.0, 1, DELTA)
    cfg = RunConfig(randomness="reproducible", engine="flower", client_budget_epsilon=one, delta=DELTA, epsilon=3.0, **CFG)
    theta = np.zeros(cfg.dim)
    ctx = cohort_context(1)
    first = cohort(cohort_msg(cfg, [11], 101, theta), ctx)
    assert list(first.content.array_records["arrays"].keys()) == ["ldp-message:11"]
    sent = cohort_msg(cfg, [10, 11, 12], 101, theta)
    reply = cohort(sent, ctx)
    assert list(reply.content.array_records["arrays"].keys()) == ["ldp-message:10", "ldp-message:12"]
    assert [cl.load(ctx, c).messages for c in (10, 11, 12)] == [1, 1, 1]
    ldp = CohortDecoding(_Sent([sent]), cfg.encoder, cfg.epsilon, cfg.clip, frame_seed=cfg.seed, identify=lambda n: n)
    arrays = ArrayRecord({"theta": Array(theta)})
    ldp.prepare(arrays, None)
    ldp.configure_train(T, arrays, ConfigRecord({"server-round": T}), None)  # type: ignore[arg-type]
    ldp.aggregate_train(T, [_reply(sent, reply.content)])
    assert ldp.last["senders"] == [10, 12] and [d["client"] for d in ldp.last["dropped"]] == [11]
    assert ldp.last["dropped"][0]["reason"].startswith(f"client refused: {cl.BUDGET_SPENT}client 11 has sent 1 messages")


@contextlib.contextmanager
def _bare_root() -> Iterator[None]:
    """No handler on the root logger while the block runs (pytest's own come back after)."""
    import logging

    root = logging.getLogger()
    kept, root.handlers = root.handlers, []
    try:
        yield
    finally:
        root.handlers = kept


@pytest.fixture
def unconfigured_logging(monkeypatch):
    """A ClientApp process's logging (with :func:`_bare_root`): no handler on ``sstq_fl``, ``sstq_fl`` at NOTSET, Flower's
    console handler writing to a buffer (its output is what ``flwr run`` streams); returns the buffer."""
    import io
    import logging

    from flwr.common.logger import console_handler

    monkeypatch.setattr(logging.getLogger("sstq_fl"), "handlers", [])
    monkeypatch.setattr(logging.getLogger("sstq_fl"), "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger("flwr"), "level", logging.DEBUG)
    monkeypatch.setattr(console_handler, "stream", io.StringIO())
    logging.getLogger("sstq_fl.flower").manager._clear_cache()
    yield console_handler.stream
    logging.getLogger("sstq_fl.flower").manager._clear_cache()


def test_the_ledger_line_reaches_flowers_log_stream_under_a_client_app(run_identity, unconfigured_logging):
    """Under a ClientApp with logging unconfigured, each message's ledger line shows at INFO in Flower's console
    output; it names the client's public counts and budget, never the update's values or a duration."""
    from flwr.clientapp import ClientApp

    app, handler = ClientApp(mods=[_mod(budget=8.0)]), _Handler()
    app.train()(handler)
    ctx = _context()
    with _bare_root():
        for t in (1, 2):
            assert not app(_msg(t), ctx).has_error()
    lines = [line for line in unconfigured_logging.getvalue().splitlines() if "ledger" in line]
    assert len(lines) == 2 and all("INFO" in line for line in lines), unconfigured_logging.getvalue()
    assert "client 3 ledger: 2 LDP messages, epsilon " in lines[1] and "budget: epsilon=8 at delta=1e-05" in lines[1]
    numbers = re.findall(r"[-+]?\d*\.?\d+(?:e[-+]?\d+)?", lines[1].split("ledger:", 1)[1])
    rep = LdpEncodeMod.report(ctx, DELTA)
    assert [float(x) for x in numbers] == pytest.approx([2, rep["epsilon"], DELTA, 8, DELTA], rel=1e-5)


def test_a_users_logging_setup_is_left_alone(run_identity, unconfigured_logging):
    """With a handler of the user's on the root, nothing is attached and Flower's console shows no ledger line."""
    import logging

    from flwr.clientapp import ClientApp

    seen: list[str] = []
    mine = logging.Handler()
    mine.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    app = ClientApp(mods=[_mod()])
    app.train()(_Handler())
    with _bare_root():
        logging.getLogger().addHandler(mine)
        logging.getLogger("sstq_fl").setLevel(logging.INFO)
        assert not app(_msg(1), _context()).has_error()
    assert logging.getLogger("sstq_fl").handlers == [] and "ledger" not in unconfigured_logging.getvalue()
    assert any("client 3 ledger: 1 LDP messages" in s for s in seen)


def test_a_mod_built_without_the_flower_log_leaves_flowers_stream_alone(run_identity, unconfigured_logging):
    """``flower_log=False`` (the project's ClientApp in a quiet simulation): no handler is attached, no ledger line
    reaches Flower's console output."""
    import logging

    from flwr.clientapp import ClientApp

    mod = LdpEncodeMod(SPEC, epsilon=EPS, radius=0.5, randomness="reproducible", flower_log=False)
    app = ClientApp(mods=[mod])
    app.train()(_Handler())
    with _bare_root():
        assert not app(_msg(1), _context()).has_error()
    assert logging.getLogger("sstq_fl").handlers == [] and "ledger" not in unconfigured_logging.getvalue()
