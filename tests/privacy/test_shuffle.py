"""The shuffle-model bound: reference implementations, closed form, exact small cases, and an attack."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from sstq_fl.cli import main
from sstq_fl.privacy.errors import UnsupportedEventError
from sstq_fl.privacy.events import PrivacyEvent, ShuffledLdpEvent
from sstq_fl.privacy.ldp import ldp_plan_report
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.shuffle import fmt21_closed_form, fmt21_pair, pair_pld, variation_ratio_pair

GRID = 1e-4

# apple/ml-shuffling-amplification (Feldman, McMillan & Talwar, FOCS 2021), computeamplification.numericalanalysis
# with 24 bisection steps and step 1 (n <= 10^4) or 10: (n, eps0, delta, lower bound, upper bound).  The first row is
# also the README's published example (step 100, 10 steps: between 0.1675 and 0.1728).
FMT21 = [
    (10**5, 4.0, 1e-6, 0.16954507972944294, 0.1751213467835388),
    (10**4, 1.0, 1e-6, 0.05300519457045363, 0.05556160076032994),
    (10**3, 2.0, 1e-5, 0.4673304557800293, 0.49050748348236084),
    (10**4, 3.0, 1e-8, 0.4022687710299384, 0.41311948204810606),
    (10**6, 5.0, 1e-8, 0.11102939532459846, 0.11401183525264813),
]
# wangsw/PrivacyAmplification (Wang et al., PVLDB 2024), unifiedamplification.amplificationUB / LB with 30 bisection
# steps for flat k-ary randomized response: (n, eps0, delta, k, lower bound, upper bound).
VARIATION_RATIO = [
    (10**4, 1.0, 1e-6, 2, 0.04320615716278553, 0.043206481263041496),
    (10**5, 4.0, 1e-6, 2, 0.11815306544303894, 0.1181609109044075),
    (10**4, 3.0, 1e-8, 16, 0.21666749753057957, 0.2167573207989335),
    (10**3, 2.0, 1e-5, 16, 0.1955552864819765, 0.19555530324578285),
    (10**5, 1.0, 1e-7, 4, 0.011752341873943806, 0.011760181747376919),
]


def central_epsilon(pair, delta: float) -> float:
    return float(pair_pld(pair, GRID).get_epsilon_for_delta(delta))


@pytest.mark.parametrize(("n", "eps0", "delta", "lower", "upper"), FMT21)
def test_fmt21_pair_matches_the_reference_implementation(n, eps0, delta, lower, upper):
    eps = central_epsilon(fmt21_pair(eps0, n), delta)
    assert lower * (1 - 1e-4) <= eps <= upper  # the exact value lies between the reference's two bounds
    assert eps <= lower * 1.01  # and within 1 % of its lower one (its upper one is looser by design)


@pytest.mark.parametrize(("n", "eps0", "delta", "k", "lower", "upper"), VARIATION_RATIO)
def test_variation_ratio_matches_the_reference_implementation(n, eps0, delta, k, lower, upper):
    pair = variation_ratio_pair(eps0, n, math.expm1(eps0) / (math.exp(eps0) + k - 1))  # the pair's numerics
    eps = central_epsilon(pair, delta)
    assert lower * (1 - 1e-4) <= eps <= upper * 1.01


@pytest.mark.parametrize(("n", "eps0"), [(2000, 0.5), (2000, 1.0), (10**4, 0.5), (10**4, 2.0), (10**5, 2.0), (10**5, 4.0)])
def test_numerical_bound_is_below_the_closed_form(n, eps0):
    delta = 1e-6
    closed = fmt21_closed_form(eps0, n, delta)
    if closed is None:
        pytest.skip("outside the closed form's range")
    assert central_epsilon(fmt21_pair(eps0, n), delta) <= closed
    assert central_epsilon(variation_ratio_pair(eps0, n), delta) <= central_epsilon(fmt21_pair(eps0, n), delta)


def test_closed_form_refuses_outside_its_range():
    assert fmt21_closed_form(4.0, 1000, 1e-6) is None
    # the reference code's closed form (the first is its README's published example)
    assert fmt21_closed_form(4.0, 10**5, 1e-6) == pytest.approx(0.5378040242374512, rel=1e-12)
    assert fmt21_closed_form(1.0, 10**4, 1e-6) == pytest.approx(0.2332655961237434, rel=1e-12)


def test_more_messages_amplify_more():
    eps = [central_epsilon(variation_ratio_pair(2.0, n), 1e-6) for n in (100, 1000, 10**4)]
    assert eps[0] > eps[1] > eps[2] > 0
    assert eps[0] <= 2.0


# ---------------------------------------------------------------------- exact small cases

def rr_channel(eps0: float, k: int) -> np.ndarray:
    e = math.exp(eps0)
    return (np.full((k, k), 1.0) + np.eye(k) * (e - 1)) / (e + k - 1)


def shuffled_law(channel: np.ndarray, inputs: tuple[int, ...]) -> dict[tuple[int, ...], float]:
    """Exact law of the histogram of the shuffled messages (what a shuffler reveals)."""
    law: dict[tuple[int, ...], float] = {(0,) * channel.shape[1]: 1.0}
    for x in inputs:
        nxt: dict[tuple[int, ...], float] = {}
        for hist, pr in law.items():
            for y, py in enumerate(channel[x]):
                h = list(hist)
                h[y] += 1
                nxt[tuple(h)] = nxt.get(tuple(h), 0.0) + pr * py
        law = nxt
    return law


def hockey_stick(p: dict, q: dict, eps: float) -> float:
    return sum(max(0.0, pv - math.exp(eps) * q.get(o, 0.0)) for o, pv in p.items())


def worst_delta(k: int, n: int, eps0: float, epsilons: tuple[float, ...]) -> dict[float, float]:
    """Exact worst δ(ε) of the shuffled histogram over every data set of ``n`` clients and victim pair."""
    ch = rr_channel(eps0, k)
    worst = dict.fromkeys(epsilons, 0.0)
    for others in itertools.combinations_with_replacement(range(k), n - 1):
        for a, b in itertools.permutations(range(k), 2):
            p, q = shuffled_law(ch, (a, *others)), shuffled_law(ch, (b, *others))
            for e in worst:
                worst[e] = max(worst[e], hockey_stick(p, q, e))
    return worst


@pytest.mark.parametrize(("k", "n"), [(2, 6), (3, 5), (4, 4)])
def test_bound_dominates_every_exact_small_shuffle(k, n):
    """Flat k-RR, every data set of ``n`` clients (up to order), every victim pair: the exact δ(ε) of the
    shuffled histogram is at most the event's."""
    led = PrivacyLedger("replace_one", GRID)
    led.record(ShuffledLdpEvent(2.0, n))
    worst = worst_delta(k, n, 2.0, (0.0, 0.5, 1.0, 1.5))
    for e, d in worst.items():
        assert d <= led.delta(e) + 1e-12
    assert worst[0.5] > 0.01  # the cases are not trivial


def test_own_law_tightening_is_refuted_by_exact_enumeration():
    """Why the event does not use a randomizer's own total variation: with flat 3-RR's
    ``β = (e^ε₀ − 1)/(e^ε₀ + 2)`` the variation-ratio pair claims δ(1.5) = 0.1033 at n = 5, ε₀ = 2;
    the exact worst case is 0.1221 (victim 0 vs 2 among others holding 0, 0, 0, 1)."""
    own = variation_ratio_pair(2.0, 5, math.expm1(2.0) / (math.exp(2.0) + 2))
    claimed = float(pair_pld(own, GRID).get_delta_for_epsilon(1.5))
    exact = worst_delta(3, 5, 2.0, (1.5,))[1.5]
    assert claimed == pytest.approx(0.10326, abs=1e-4)
    assert exact == pytest.approx(0.12213, abs=1e-4)
    assert exact > claimed


def test_optimal_attack_succeeds_on_identified_messages_and_fails_on_shuffled_ones():
    """The best distinguisher of the victim's two inputs (the exact hockey-stick divergence): against the
    messages with sender identities (the server's view) it reaches δ far above the target at the central
    ε; against the shuffled histogram it stays at or below the target, as the event claims."""
    eps0, n, delta = 3.0, 400, 1e-3
    led = PrivacyLedger("replace_one", GRID)
    led.record(ShuffledLdpEvent(eps0, n))
    central = led.epsilon(delta)
    assert central < eps0 / 2
    ch = rr_channel(eps0, 2)
    identified = hockey_stick(dict(enumerate(ch[0])), dict(enumerate(ch[1])), central)
    assert identified > 100 * delta
    worst = 0.0
    for m in range(n):  # m other clients hold 1, the rest 0: the count of 1s is all the shuffler reveals
        others = np.convolve(stats.binom.pmf(np.arange(m + 1), m, ch[1][1]),
                             stats.binom.pmf(np.arange(n - m), n - 1 - m, ch[0][1]))
        p, q = np.convolve(others, ch[0]), np.convolve(others, ch[1])
        worst = max(worst, float(np.maximum(0.0, p - math.exp(central) * q).sum()))
    assert worst <= delta


# ---------------------------------------------------------------------- the event

def test_event_round_trips_and_composes():
    ev = ShuffledLdpEvent(3.0, 1000)
    assert PrivacyEvent.from_json(ev.to_json()) == ev
    led = PrivacyLedger("replace_one", GRID)
    led.record(ev, 100)
    total = led.epsilon(1e-5)
    one = PrivacyLedger("replace_one", GRID)
    one.record(ev)
    assert one.epsilon(1e-5) < total < 100 * one.epsilon(1e-5)
    assert total < 300 / 10  # far below the local 100 x 3


def test_event_refuses_what_it_cannot_claim():
    with pytest.raises(ValueError, match="messages"):
        ShuffledLdpEvent(1.0, 0)
    with pytest.raises(ValueError, match="epsilon0"):
        ShuffledLdpEvent(-1.0, 10)
    with pytest.raises(UnsupportedEventError, match="replace_one"):
        PrivacyLedger("add_or_remove_one", GRID).record(ShuffledLdpEvent(1.0, 100))


def test_plan_reports_the_central_epsilon_with_its_assumption(capsys):
    rep = ldp_plan_report(1.0, 100, 1e-6, shuffle=10**4)
    sh = rep["shuffled"]
    assert sh["per_round"] == pytest.approx(0.04326, abs=5e-5)  # the reference code's 0.04321, on our grid
    assert sh["per_round"] < sh["pld"] < 100 * sh["per_round"] and sh["pld"] < rep["pld"] / 50
    assert sh["per_round_fmt21_closed_form"] == pytest.approx(0.2332655961237434)
    assert "trusted shuffler" in sh["threat_model"]
    assert main(["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "100", "--shuffle", "10000", "--delta", "1e-6"]) == 0
    out = capsys.readouterr().out
    assert "10000 messages a round (central epsilon)" in out and f"PLD total {sh['pld']:.4g}" in out
