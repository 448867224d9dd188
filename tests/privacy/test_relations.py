"""Runs under both neighbouring relations stated under replace-one: the exact re-accounting against closed forms
and quadrature, group privacy's numbers, and what composes."""

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from sstq_fl.privacy.events import (
    ApproxDpEvent,
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PureDpEvent,
)
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.relations import (
    EXACT,
    GROUP,
    RECORDED,
    Run,
    as_replace_one,
    combine,
    compose,
    group_event,
    group_privacy,
    method,
)

AR, RO = "add_or_remove_one", "replace_one"


def _analytic_gaussian_epsilon(mu: float, delta: float) -> float:
    """ε at δ of two unit-variance Gaussians ``mu`` apart: ``δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)`` (Balle &
    Wang, ICML 2018, Thm. 8)."""
    def gap(e: float) -> float:
        return float(stats.norm.cdf(mu / 2 - e / mu) - math.exp(e) * stats.norm.cdf(-mu / 2 - e / mu) - delta)

    return float(optimize.brentq(gap, 0.0, 100.0))


def test_a_gaussian_under_add_remove_restated_under_replace_one_is_the_gaussian_of_twice_the_shift():
    run = Run(AR, [(GaussianEvent(1.0), 1)])
    assert method(run) == EXACT
    eps, methods = as_replace_one([run], 1e-5)
    assert methods == (EXACT,) and eps == pytest.approx(10.0, abs=0.01)
    assert eps == pytest.approx(_analytic_gaussian_epsilon(2.0, 1e-5), rel=1e-3)  # shift 2Δ
    assert eps == pytest.approx(compose(AR, [(GaussianEvent(0.5), 1)], 1e-5), rel=1e-9)  # = σ/2 under add/remove
    assert compose(AR, run.plan, 1e-5) == pytest.approx(4.38, abs=0.01)
    assert compose(AR, run.plan, 1e-5) == pytest.approx(_analytic_gaussian_epsilon(1.0, 1e-5), rel=1e-3)


def _hockey_stick_line(eps: float, q: float, a: float, b: float) -> float:
    """``∫ (p − e^ε r)₊`` for ``p = (1−q)N(0, 1) + qN(a, 1)``, ``r = (1−q)N(0, 1) + qN(b, 1)`` (quadrature)."""
    def gap(x: float) -> float:
        p = (1 - q) * stats.norm.pdf(x) + q * stats.norm.pdf(x, a)
        return max(p - math.exp(eps) * ((1 - q) * stats.norm.pdf(x) + q * stats.norm.pdf(x, b)), 0.0)

    return float(integrate.quad(gap, -30, 30, limit=400, points=[0.0])[0])


def _hockey_stick_plane(eps: float, q: float, a: tuple[float, float], b: tuple[float, float]) -> float:
    """The same for means ``a``, ``b`` in the plane, on a grid (spacing 0.025 over ``[−10, 10]²``)."""
    g = np.linspace(-10, 10, 801)
    x, y = np.meshgrid(g, g)

    def mix(c: tuple[float, float]) -> np.ndarray:
        return ((1 - q) * np.exp(-(x**2 + y**2) / 2) + q * np.exp(-((x - c[0]) ** 2 + (y - c[1]) ** 2) / 2)) / (2 * np.pi)

    return float(np.maximum(mix(a) - math.exp(eps) * mix(b), 0).sum() * (g[1] - g[0]) ** 2)


def test_poisson_sampled_gaussian_under_replace_one_is_the_replace_pair_of_the_same_sampling():
    """DP-SGD's step: the replaced record is sampled with probability q on both data sets, the rest of the batch is
    common; the PLD's δ(ε) is the quadrature of the pair b = −a, and other pairs in the plane give less."""
    q = 0.05
    led = PrivacyLedger(RO)
    led.record(PoissonSampledEvent(q, GaussianEvent(1.0)))
    for eps in (0.05, 0.2):
        exact = _hockey_stick_line(eps, q, -1.0, 1.0)
        assert led.delta(eps) == pytest.approx(exact, rel=1e-3) and led.delta(eps) >= exact * (1 - 1e-6)
        assert _hockey_stick_plane(eps, q, (1.0, 0.0), (-1.0, 0.0)) == pytest.approx(exact, rel=1e-3)
        for b in [(-0.5, math.sqrt(3) / 2), (0.0, 1.0), (-0.5, 0.0)]:
            assert _hockey_stick_plane(eps, q, (1.0, 0.0), b) < 0.95 * exact


def test_exact_restatement_of_dp_sgd_is_far_below_group_privacy():
    plan = [(PoissonSampledEvent(0.05, GaussianEvent(1.0)), 100)]
    exact, methods = as_replace_one([Run(AR, plan)], 1e-5)
    ev = group_event(plan, 0.5e-5)
    assert methods == (EXACT,) and isinstance(ev, ApproxDpEvent)
    assert compose(AR, plan, 1e-5) < exact < 0.75 * ev.epsilon  # 3.50 < 4.89 < 0.75 × 7.9


def test_group_privacy_of_size_two():
    eps, delta = group_privacy(1.0, 1e-6)
    assert eps == 2.0 and delta == pytest.approx((1 + math.e) * 1e-6)
    assert group_privacy(0.5, 0.0) == (1.0, 0.0) and group_privacy(800.0, 1e-9)[1] == math.inf


def test_a_laplace_run_falls_back_to_group_privacy_and_composes_as_one_approximate_release():
    run, delta = Run(AR, [(LaplaceEvent(2.0), 1)]), 1e-5
    share = delta / 2
    assert method(run) == GROUP  # the accountant has Laplace under add/remove only
    ev = group_event(run.plan, share)
    assert isinstance(ev, ApproxDpEvent) and ev.relation == RO
    eps_i = ev.epsilon / 2
    d_i = ev.delta / (1 + math.exp(eps_i))
    j = round(-math.log2(d_i / share))
    assert d_i == pytest.approx(share * 2.0**-j) and eps_i == pytest.approx(compose(AR, run.plan, d_i), rel=1e-12)
    assert eps_i == pytest.approx(0.5, abs=1e-3) and ev.delta <= share  # the largest such δ_i: twice it does not fit
    assert (1 + math.exp(compose(AR, run.plan, 2 * d_i))) * 2 * d_i > share
    total, methods = as_replace_one([run], delta)
    # one (ε', δ') release at δ > δ': δ(ε) = δ' + (1 − δ')(e^{ε'} − e^ε)/(1 + e^{ε'}), solved for ε
    closed = math.log(math.exp(ev.epsilon) - (delta - ev.delta) * (1 + math.exp(ev.epsilon)) / (1 - ev.delta))
    assert methods == (GROUP,) and total == pytest.approx(closed, abs=1e-3) and total <= ev.epsilon + 1e-3


def test_a_pure_add_remove_run_becomes_twice_its_epsilon_and_a_composed_one_falls_back_whole():
    run = Run(AR, [(PureDpEvent(0.7, AR), 3)])
    assert group_event(run.plan, 5e-6) == PureDpEvent(2 * compose(AR, run.plan, 0.0), RO)
    eps, methods = as_replace_one([run], 1e-5)
    assert methods == (GROUP,) and eps == pytest.approx(compose(RO, [(PureDpEvent(4.2), 1)], 1e-5), rel=1e-12)
    mixed = Run(AR, [(ComposedEvent((GaussianEvent(2.0), LaplaceEvent(1.0))), 1)])
    assert method(mixed) == GROUP and isinstance(group_event(mixed.plan, 5e-6), ApproxDpEvent)


def test_combine_reports_add_remove_only_where_every_run_was():
    mepf, straight = Run(RO, [(GaussianEvent(4.0), 1)]), Run(AR, [(GaussianEvent(6.0), 2)])
    both = combine([mepf, straight], 1e-5)
    assert both.relation == RO and both.epsilon_add_or_remove_one is None and both.methods == (RECORDED, EXACT)
    assert both.epsilon == both.epsilon_replace_one == pytest.approx(
        compose(RO, [*mepf.plan, *straight.plan], 1e-5), rel=1e-12)
    alone = combine([straight], 1e-5)
    assert alone.relation == AR and alone.epsilon == alone.epsilon_add_or_remove_one == compose(AR, straight.plan, 1e-5)
    assert alone.epsilon_replace_one == pytest.approx(compose(RO, straight.plan, 1e-5), rel=1e-12)
    assert combine([straight], 1e-5, both=False).epsilon_replace_one is None
    assert math.isinf(combine([mepf, Run(AR, [(NonPrivateEvent(), 1)])], 1e-5).epsilon)
    with pytest.raises(ValueError, match="no runs"):
        combine([], 1e-5)
