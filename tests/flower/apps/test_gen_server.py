"""The generative workloads on Flower + Ray, against the clients' own ledgers (the gen bypass attack, end to end)."""

from __future__ import annotations

import json

import pytest

from sstq_fl.data.workload import WorkloadData
from sstq_fl.flower import client_ledger as cl
from sstq_fl.flower.apps.gen_client import NOT_TRUSTED, TRUST_AGGREGATOR
from sstq_fl.flower.apps.gen_server import run_on_flower
from sstq_fl.gen.runner import DPRunner
from sstq_fl.privacy.events import GaussianEvent, PoissonSampledEvent, PureDpEvent

from ...gen.test_runner import _params

DATA = WorkloadData(dataset="synthetic", clients=3, records=300, seed=0)


def _pipeline(pool):
    """One noised sum and one DP-SGD round; what each client sent or why it was left out."""
    run = DPRunner(pool, "attack", "add_or_remove_one", seed=5, randomness="reproducible")
    out = {}
    for name, release in (("sums", lambda: run.additive_release("s", "stats.class_sums", {}, {}, 2.0, 1.0)),
                          ("sgd", lambda: run.dpsgd_round("sgd", "dpsgd.clipped_sum", _params(),
                                                          {"model": "mlp-classifier"}, 0.5, 1.0, 1.0))):
        try:
            out[name] = sorted(release())
        except RuntimeError as exc:  # no client answered
            out[name] = str(exc)
    return {"released": out, "dropped": [dict(d) for d in pool.dropped]}


def _ledgers(folder) -> dict[int, list]:
    return {int(p.stem.rsplit("-", 1)[1]): json.loads(p.read_text())["events"] for p in folder.glob("client-ledger-*")}


def _spend(folder, client: int, epsilon: float) -> None:
    led = cl.ClientLedger(client)
    led.charge(PureDpEvent(epsilon))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"client-ledger-{client}.json").write_text(json.dumps(led.to_json()))


@pytest.mark.parametrize("opt_in", [False, True])
def test_the_gen_bypass_attack_is_refused_and_opted_in_releases_are_charged(tmp_path, monkeypatch, opt_in):
    """Client 0's ledger is spent (ε = 59.9 against the operator's budget 60: one more Gaussian release at σ = 1
    exceeds it).  Without the operator's opt-in every client refuses both releases and no ledger moves; with it,
    clients 1 and 2 send and are charged the central events their sums feed, client 0 refuses."""
    folder = tmp_path / "ledgers"
    monkeypatch.setenv(cl.LEDGER_DIR_ENV, str(folder))
    _spend(folder, 0, 59.9)
    before = _ledgers(folder)
    nodes = {cl.NODE_BUDGET_EPSILON: 60.0, **({TRUST_AGGREGATOR: True} if opt_in else {})}
    got = run_on_flower(_pipeline, DATA, node_config=nodes)
    reasons = {(d["task"], d["client"]): d["reason"] for d in got["dropped"]}
    if not opt_in:
        assert got["released"] == {"sums": "no client answered; nothing to release",
                                   "sgd": "no client answered; nothing to release"}
        assert len(reasons) == 6 and all(NOT_TRUSTED in why for why in reasons.values())
        assert _ledgers(folder) == before
        return
    assert set(reasons) == {("stats.class_sums", 0), ("dpsgd.clipped_sum", 0)}
    assert all(cl.BUDGET_SPENT in why for why in reasons.values())
    after = _ledgers(folder)
    assert after[0] == before[0]
    for c in (1, 2):
        assert [e["event"] for e in after[c]] == [GaussianEvent(1.0).to_json(),
                                                  PoissonSampledEvent(0.5, GaussianEvent(1.0)).to_json()]
