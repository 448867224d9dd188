import math
import subprocess
import sys

import dp_accounting
import pytest
from dp_accounting import pld
from scipy.stats import norm

from sstq_fl.privacy.errors import Budget, BudgetExceededError, PlanExceededError, UnsupportedEventError
from sstq_fl.privacy.events import (
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PublicDataEvent,
    PureDpEvent,
    RandomizedResponseEvent,
)
from sstq_fl.privacy.ledger import PrivacyLedger


def pure(eps, n, delta=1e-5):
    led = PrivacyLedger()
    led.record(PureDpEvent(eps), n)
    return led.epsilon(delta), led


@pytest.mark.parametrize("eps,n,ref", [(0.5, 100, 31.2), (0.1, 1000, 17.8), (3.0, 100, 300.0)])
def test_spec_reference_values(eps, n, ref):
    got, led = pure(eps, n)
    assert got == pytest.approx(ref, abs=0.1)
    assert led.basic_epsilon() == pytest.approx(eps * n)


@pytest.mark.parametrize("eps", [0.05, 0.3, 1.0, 4.0])
@pytest.mark.parametrize("n", [1, 7, 200])
def test_pld_never_exceeds_basic_composition(eps, n):
    got, _ = pure(eps, n)
    assert got <= eps * n + 1e-9
    if n == 1:
        assert got == pytest.approx(eps, abs=2e-4)


@pytest.mark.parametrize("relation,sens", [("add_or_remove_one", 1.0), ("replace_one", 2.0)])
@pytest.mark.parametrize("sigma", [0.7, 1.0, 3.0])
def test_analytic_gaussian_mechanism(relation, sens, sigma):
    """Balle & Wang (2018): δ(ε) = Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ)."""
    led = PrivacyLedger(relation)
    led.record(GaussianEvent(sigma))
    for eps in (0.5, 1.0, 2.0):
        a, b = sens / (2 * sigma), eps * sigma / sens
        exact = norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b)
        got = led.delta(eps)
        assert exact <= got <= exact * 1.01 + 1e-9  # pessimistic discretisation, tight


def test_gaussian_reference_from_spec():
    for relation, ref in [("replace_one", 10.0), ("add_or_remove_one", 4.38)]:
        led = PrivacyLedger(relation)
        led.record(GaussianEvent(1.0))
        assert led.epsilon(1e-5) == pytest.approx(ref, abs=0.02)


def test_subsampled_gaussian_against_independent_accountants():
    from opacus.accountants import PRVAccountant

    q, sigma, steps, delta = 0.01, 1.0, 2000, 1e-5
    led = PrivacyLedger("add_or_remove_one")
    led.record(PoissonSampledEvent(q, GaussianEvent(sigma)), steps)
    ours = led.epsilon(delta)
    prv = PRVAccountant()
    prv.history = [(sigma, q, steps)]
    other = prv.get_epsilon(delta)
    assert ours == pytest.approx(other, rel=0.03)
    rdp = led.rdp_epsilon(delta)
    assert rdp is not None and ours < rdp < ours * 1.3  # RDP is an upper bound, looser


def test_rr_count_bug_in_dp_accounting_is_avoided():
    """dp-accounting 0.6's PLD accountant ignores the count of a self-composed RR event."""
    rr = dp_accounting.RandomizedResponseDpEvent(noise_parameter=2 / (1 + math.exp(0.5)), num_buckets=2)
    composed = pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    composed.compose(dp_accounting.ComposedDpEvent([rr] * 49))
    truth = composed.get_epsilon(1e-5)
    assert truth == pytest.approx(18.6, abs=0.05)
    led = PrivacyLedger("replace_one")
    led.record(RandomizedResponseEvent(rr.noise_parameter, 2), 49)
    assert led.epsilon(1e-5) == pytest.approx(truth, rel=1e-6)
    buggy = pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    buggy.compose(dp_accounting.SelfComposedDpEvent(rr, 49))
    if buggy.get_epsilon(1e-5) > 1.0:  # pragma: no cover - upstream fixed; our path stays correct either way
        pytest.skip("dp-accounting no longer has the self-composed RR bug")
    assert buggy.get_epsilon(1e-5) == pytest.approx(0.5, abs=0.01)


def test_binary_rr_equals_pure_eps():
    led = PrivacyLedger()
    led.record(RandomizedResponseEvent.flat(0.5, 2), 100)
    assert led.epsilon(1e-5) == pytest.approx(pure(0.5, 100)[0], abs=0.01)


def test_unsupported_events_are_refused_with_the_mechanism_named():
    with pytest.raises(UnsupportedEventError, match="randomized_response"):
        PrivacyLedger("add_or_remove_one").record(RandomizedResponseEvent.flat(1.0, 4))
    with pytest.raises(UnsupportedEventError, match="laplace"):
        PrivacyLedger("replace_one").record(LaplaceEvent(1.0))
    with pytest.raises(UnsupportedEventError, match="randomized_response"):
        PrivacyLedger("replace_one").record(PoissonSampledEvent(0.1, RandomizedResponseEvent.flat(1.0, 4)))
    with pytest.raises(UnsupportedEventError, match="pure_dp event holds under add_or_remove_one"):
        PrivacyLedger("replace_one").record(PureDpEvent(1.0, "add_or_remove_one"))
    with pytest.raises(ValueError, match="relation"):
        PrivacyLedger("swap")


def test_a_pure_epsilon_run_does_not_import_dp_accounting():
    """Encoders, the engine and a ledger of pure-ε events (plan, record, ε, δ, the RDP cross-check)
    leave dp-accounting and scipy.stats unimported (0.9 s of a short run's start-up); a ledger with
    another event imports dp-accounting for its cross-check."""
    code = ("import sys, sstq_fl.encoders, sstq_fl.fl.engine\n"
            "from sstq_fl.privacy.events import PublicDataEvent, PureDpEvent\n"
            "from sstq_fl.privacy.ledger import PrivacyLedger\n"
            "led = PrivacyLedger('replace_one', notes={'threat_model': 'identified'})\n"
            "led.start([(PureDpEvent(3.0), 10), (PublicDataEvent(), 1)])\n"
            "assert (led.epsilon(1e-5), led.delta(0.0)) == (0.0, 0.0)  # nothing recorded: the identity, no PLD\n"
            "led.transcript_texts(1e-5)  # a checkpoint before the first round\n"
            "led.record(PureDpEvent(3.0), 10, meta={'round': 0})\n"
            "led.record(PublicDataEvent())\n"
            f"assert (led.epsilon(1e-5), led.delta(1.0)) == ({pure(3.0, 10)[0]!r}, {pure(3.0, 10)[1].delta(1.0)!r})\n"
            "assert led.rdp_epsilon(1e-5) > led.epsilon(1e-5)\n"
            "assert 'dp_accounting' not in sys.modules and 'scipy.stats' not in sys.modules\n"
            "from sstq_fl.privacy.events import GaussianEvent\n"
            "other = PrivacyLedger('replace_one')\n"
            "other.record(GaussianEvent(1.0))\n"
            "assert other.rdp_epsilon(1e-5) is not None and 'dp_accounting' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_non_private_and_public_events():
    led = PrivacyLedger()
    led.record(PublicDataEvent("feature extractor trained on public data"))
    assert led.epsilon(1e-5) == 0.0
    led.record(ExponentialMechanismEvent(0.3), 2)
    assert led.epsilon(1e-5) == pytest.approx(0.6, abs=1e-3)
    led.record(NonPrivateEvent())
    assert led.epsilon(1e-5) == math.inf


def test_plan_budget_refusal_and_early_stop(tmp_path):
    step = PureDpEvent(0.5)
    led = PrivacyLedger()
    with pytest.raises(BudgetExceededError, match=r"spends epsilon=31.17 .*budget epsilon=20"):
        led.start([(step, 100)], Budget(20.0, 1e-5))
    planned = led.start([(step, 100)], Budget(40.0, 1e-5))
    assert planned == pytest.approx(31.17, abs=0.01)
    led.record(step, 30)
    with pytest.raises(PlanExceededError, match="exceeds the declared plan"):
        led.record(step, 71)
    with pytest.raises(PlanExceededError):
        led.record(GaussianEvent(1.0))
    rep = led.report(1e-5)
    assert rep["stopped_early"] and rep["epsilon"] < rep["planned_epsilon"]
    assert rep["epsilon"] == pytest.approx(pure(0.5, 30)[0])
    with pytest.raises(ValueError, match="before any event"):
        led.start([(step, 1)])


def test_transcript_replay_is_exact(tmp_path):
    led = PrivacyLedger("add_or_remove_one", notes={"run": "test"})
    led.start([(PoissonSampledEvent(0.02, GaussianEvent(1.3)), 500), (PureDpEvent(1.0, "add_or_remove_one"), 3)],
              Budget(100, 1e-6))
    led.record(PoissonSampledEvent(0.02, GaussianEvent(1.3)), 250, subset="private-train")
    led.record(PureDpEvent(1.0, "add_or_remove_one"), 1, note="label counts")
    led.record(PoissonSampledEvent(0.02, GaussianEvent(1.3)), 250, subset="private-train")
    path = tmp_path / "t.jsonl"
    led.write_transcript(path, delta=1e-6)
    back, summary = PrivacyLedger.from_transcript(path)
    assert back.epsilon(1e-6) == led.epsilon(1e-6) == summary["epsilon"]
    assert back.relation == "add_or_remove_one" and back.budget == Budget(100, 1e-6) and back.notes == {"run": "test"}
    assert [e.subset for e in back.entries] == ["private-train", "private", "private-train"]
    lines = path.read_text().splitlines()
    assert '"dp_accounting"' in lines[0] and '"discretization": 0.0001' in lines[0]


def test_bad_transcripts(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"type": "event"}\n')
    with pytest.raises(ValueError, match="not an sstq-fl privacy transcript"):
        PrivacyLedger.from_transcript(p)
