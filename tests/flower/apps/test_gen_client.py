"""Every reply of the shipped ClientApp passes the client's own ledger: the generative handler included.

The attack these tests replay: a server whose client budgets are spent asks for a DP workload's statistics
(``train.gen``).  Before, every client answered with its exact per-class sums (``stats.class_sums``) or its
labels under randomized response at ε = 60, and no ledger moved."""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, Metadata, RecordDict
from flwr.app.message.message import make_message
from flwr.clientapp import ClientApp

from sstq_fl.data.workload import WorkloadData
from sstq_fl.fl.engine import RunConfig, Trainer
from sstq_fl.flower import client_ledger as cl
from sstq_fl.flower.apps.gen_client import NOT_TRUSTED, TRUST_AGGREGATOR
from sstq_fl.flower.apps.sstq_client import app, make_client_app
from sstq_fl.flower.cohort import refusals
from sstq_fl.gen.runner import CLIENT_TASKS, feeds, registered_task
from sstq_fl.privacy.events import GaussianEvent, PrivacyEvent, RandomizedResponseEvent

from ...gen.test_secagg_releases import BOUND, SHAPES, _secure
from ..test_cohort import CFG as COHORT_CFG
from ..test_cohort import _msg as cohort_msg

DATA = WorkloadData(dataset="synthetic", clients=4, records=400, seed=3)
SPENT = {cl.NODE_BUDGET_EPSILON: 1e-3}  # the operator's budget: below any single release here


def _gen(task: str, config: dict, node: int = 1) -> Message:
    md = Metadata(run_id=1, message_id=f"g{node}", src_node_id=0, dst_node_id=node, reply_to_message_id="",
                  group_id="", created_at=time.time(), ttl=600.0, message_type="train.gen")
    req = ConfigRecord({"task": task, "config": json.dumps({"randomness": "reproducible", **config}),
                        "data": DATA.to_json(), "seed": 0, "round": 0})
    return make_message(md, content=RecordDict({"request": req, "payload": ArrayRecord()}))


def _context(pid: int = 1, **node) -> Context:
    return Context(run_id=1, node_id=100 + pid, node_config={"partition-id": pid, "num-partitions": 4, **node},
                   state=RecordDict(), run_config={})


def _ledger(ctx: Context, pid: int = 1) -> cl.ClientLedger:
    return cl.load(ctx, pid)


SUMS = ("stats.class_sums", {"bound": 1e6, **feeds(GaussianEvent(1.0))})
LABELS = ("labels.randomized_response", {"epsilon": 60.0})


def test_sums_for_a_trusted_aggregator_are_refused_without_the_operators_opt_in(run_identity):
    for extra in ({}, {TRUST_AGGREGATOR: False}, {TRUST_AGGREGATOR: "false"}):
        ctx = _context(**extra)
        reply = app(_gen(*SUMS), ctx)
        assert reply.has_error() and NOT_TRUSTED in reply.error.reason and _ledger(ctx).messages == 0
    # the run config and the request cannot opt in: only the node config does
    ctx = _context()
    ctx.run_config[TRUST_AGGREGATOR] = True
    assert app(_gen(SUMS[0], {**SUMS[1], TRUST_AGGREGATOR: True}), ctx).has_error()


def test_with_the_opt_in_the_sums_are_charged_as_the_central_event_they_feed(run_identity):
    ctx = _context(**{TRUST_AGGREGATOR: True})
    reply = app(_gen(*SUMS), ctx)
    assert not reply.has_error() and set(reply.content.array_records["result"]) == {"counts", "sums"}
    led = _ledger(ctx)
    assert led.messages == 1 and led.ledger.entries[0].event == GaussianEvent(1.0)
    assert app(_gen(SUMS[0], {"bound": 1e6}), ctx).has_error()  # a request that names no central event
    assert _ledger(ctx).messages == 1


def test_a_spent_budget_refuses_every_release_and_the_ledger_does_not_move(run_identity):
    ctx = _context(**{TRUST_AGGREGATOR: True, **SPENT})
    for task, config in (SUMS, LABELS):
        reply = app(_gen(task, config), ctx)
        assert reply.has_error() and cl.BUDGET_SPENT in reply.error.reason
    assert _ledger(ctx).messages == 0 and cl.clients_in_state(ctx) == []


def test_an_ldp_release_is_charged_with_the_event_the_client_computes(run_identity):
    """The client computes RR's event from the ε it applied; no opt-in needed (the reply is LDP)."""
    ctx = _context()
    reply = app(_gen(*LABELS), ctx)
    assert not reply.has_error()
    assert _ledger(ctx).ledger.entries[0].event == RandomizedResponseEvent.flat(60.0, 10)
    budget = _context(**{cl.NODE_BUDGET_EPSILON: 10.0})
    assert app(_gen(*LABELS), budget).has_error() and _ledger(budget).messages == 0  # ε = 60 > 10
    assert not app(_gen(LABELS[0], {"epsilon": 1.0}), budget).has_error()


def test_every_client_task_declares_what_it_releases():
    from sstq_fl.gen.pipelines import PIPELINES

    PIPELINES.load()
    kinds = {name: registered_task(name).release.kind for name in CLIENT_TASKS}
    assert kinds["labels.randomized_response"] == kinds["vqg.tokens"] == "ldp"
    assert {k for k, v in kinds.items() if v == "trusted-aggregator"} >= {
        "stats.class_sums", "mepf.class_sums", "dpsgd.clipped_sum", "dpsgd.sampled_clipped_sum",
        "straightdp.class_moments", "straightdp.second_moment", "straightdp.latent_clipped_sum"}


def test_vqg_tokens_charge_em_per_location_and_public_labels_as_unprotected():
    from sstq_fl.gen.vqg.client_tasks import tokens_event
    from sstq_fl.gen.vqg.mechanism import stage2_plan

    out = {"tokens": np.zeros((3, 16), dtype=np.int64)}
    got = tokens_event({"eps0": 0.5, "eps_y": 1.0, "labels": "private"}, out)
    assert got.to_json() == PrivacyEvent.from_json(got.to_json()).to_json()
    plan = stage2_plan(0.5, 16, 1.0)
    assert [e for e in got.events] == [type(got.events[0])(plan[0][0], 16), plan[1][0]]  # type: ignore[attr-defined]
    public = tokens_event({"eps0": 0.5, "eps_y": 1.0, "labels": "public"}, out)
    assert public.pld("replace_one", 1e-4) is None  # true labels sent: not protected, whatever the server says


# ----------------------------------------------------------------------------- every handler, enumerated
def _train_msg(cfg: RunConfig) -> Message:
    md = Metadata(run_id=1, message_id="t1", src_node_id=0, dst_node_id=1, reply_to_message_id="", group_id="",
                  created_at=time.time(), ttl=600.0, message_type="train")
    theta = Trainer(cfg).task.init_params(0).numpy()
    conf = ConfigRecord({"server-round": 1, "run-config": json.dumps(asdict(cfg), sort_keys=True)})
    return make_message(md, content=RecordDict({"arrays": ArrayRecord({"theta": Array(theta)}), "config": conf}))


def _query_msg() -> Message:
    md = Metadata(run_id=1, message_id="q1", src_node_id=0, dst_node_id=1, reply_to_message_id="", group_id="",
                  created_at=time.time(), ttl=600.0, message_type="query")
    return make_message(md, content=RecordDict())


def _refuses_train(app: ClientApp, ctx: Context) -> None:
    cfg = RunConfig(task="lsq", dim=12, n=400, clients=4, batch=10, encoder="sstq-flat:b=4", randomness="reproducible")
    reply = app(_train_msg(cfg), ctx)
    assert reply.has_error() and cl.BUDGET_SPENT in reply.error.reason


def _refuses_cohort(app: ClientApp, ctx: Context) -> None:
    cfg = RunConfig(randomness="reproducible", **COHORT_CFG)
    theta = Trainer(cfg).task.init_params(0).numpy()
    reply = app(cohort_msg(cfg, [10, 11], 101, theta), Context(run_id=1, node_id=101, state=ctx.state, run_config={},
                                                            node_config={"partition-id": 1, **SPENT}))
    assert not reply.has_error() and len(reply.content.array_records["arrays"]) == 0
    assert refusals(reply, [10, 11]).keys() == {10, 11}
    assert all(cl.BUDGET_SPENT in why for why in refusals(reply, [10, 11]).values())


def _refuses_gen(app: ClientApp, ctx: Context) -> None:
    for task, config in (SUMS, LABELS):
        assert app(_gen(task, config), ctx).has_error()


def _answers_public_partition_only(app: ClientApp, ctx: Context) -> None:
    reply = app(_query_msg(), ctx)
    assert {k for rec in reply.content.config_records.values() for k in rec} <= {"partition-id", "num-partitions"}
    assert not reply.content.array_records and not reply.content.metric_records


HANDLERS = {"train.default": _refuses_train, "train.cohort": _refuses_cohort, "train.gen": _refuses_gen,
            "query.default": _answers_public_partition_only}


@pytest.mark.parametrize("built", [app, make_client_app(node_defaults={TRUST_AGGREGATOR: True})])
def test_no_handler_of_the_shipped_client_app_bypasses_the_ledger(run_identity, built):
    """Each registered handler, enumerated: with a spent operator budget every one that reads the data refuses and
    the ledger does not move; a new handler fails this test until it is listed with its check."""
    assert set(built._registered_funcs) == set(HANDLERS)  # noqa: SLF001 (Flower keeps them there)
    for name, check in HANDLERS.items():
        ctx = _context(**{TRUST_AGGREGATOR: True, **SPENT})
        check(built, ctx)
        assert cl.clients_in_state(ctx) == [], name


def test_a_share_needs_the_opt_in_on_flower_and_then_carries_nothing_but_the_share(run_identity):
    """No ``trust-aggregator``: the raw sums and the share are both refused (``train.gen`` runs no SecAgg+, so the
    server would see the share unmasked).  With it, the share is sent (int64 in Z_m, nothing else) and the client's
    own ledger is charged with the event it computes from the release it applied."""
    from sstq_fl.gen.releases import SECAGG, SECAGG_ROUND_SEED, SECAGG_SHAPES, SECAGG_TASK, SHARE_TASK

    ctx = Context(run_id=1, node_id=101, node_config={"partition-id": 1, "num-partitions": 4}, state=RecordDict(),
                  run_config={})
    raw = app(_gen("stats.class_sums", {"bound": BOUND, **feeds(GaussianEvent(1.0))}), ctx)
    assert raw.has_error() and NOT_TRUSTED in raw.error.reason and cl.load(ctx, 1).messages == 0
    rel = _secure()
    config = {"bound": BOUND, SECAGG_TASK: "stats.class_sums", SECAGG: json.dumps(rel.to_json()),
              SECAGG_SHAPES: json.dumps({k: list(v) for k, v in SHAPES.items()}), SECAGG_ROUND_SEED: 5}
    refused = app(_gen(SHARE_TASK, config), ctx)
    assert refused.has_error() and NOT_TRUSTED in refused.error.reason and "unmasked" in refused.error.reason
    assert cl.load(ctx, 1).messages == 0
    ctx = Context(run_id=1, node_id=101, state=RecordDict(), run_config={},
                  node_config={"partition-id": 1, "num-partitions": 4, "trust-aggregator": True})
    reply = app(_gen(SHARE_TASK, config), ctx)
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    result = reply.content.array_records["result"]
    assert set(result) == {"share"}
    share = result["share"].numpy()
    assert share.dtype == np.int64 and share.shape == (rel.padded,) and 0 <= share.min() and share.max() < 2**32
    led = cl.load(ctx, 1)
    assert led.messages == 1 and led.ledger.entries[0].event == rel.event()
    # a share of anything but an additive task, of the wrong shapes or of no release fails on the client (an error
    # reply in a Flower process) and nothing is charged or sent
    for bad in ({**config, SECAGG_TASK: "labels.randomized_response", "epsilon": 1.0},
                {**config, SECAGG_SHAPES: json.dumps({"counts": [10]})}, {k: v for k, v in config.items() if k != SECAGG}):
        with pytest.raises((ValueError, KeyError), match="additive task|expected the arrays|secagg"):
            app(_gen(SHARE_TASK, bad), ctx)
    assert cl.load(ctx, 1).messages == 1

