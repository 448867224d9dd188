"""The secure-aggregation events (distributed discrete Gaussian, Skellam) and the ledger's RDP composition."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sstq_fl.privacy.errors import UnsupportedEventError
from sstq_fl.privacy.events import (
    DistributedDiscreteGaussianEvent,
    NonPrivateEvent,
    PrivacyEvent,
    PureDpEvent,
    SkellamSumEvent,
)
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.rdp import CURVE_ORDERS, curve_delta, curve_epsilon, zcdp_epsilon


def ddg(sigma: float = 40.0, n: int = 50, l2: float = 300.0, d: int = 256) -> DistributedDiscreteGaussianEvent:
    return DistributedDiscreteGaussianEvent(local_stddev=sigma, clients=n, l2_bound=l2, l1_bound=l2 * math.sqrt(d),
                                            dim=d)


def test_ddgauss_is_the_gaussian_rdp_when_tau_vanishes() -> None:
    """σ large: τ ≈ 0 and the curve is α s²/2 with s = Δ₂/(√n σ); composed over rounds, its ε is the closed-form
    zCDP figure of ρ = rounds · s²/2 (an independent conversion)."""
    e = ddg(sigma=40.0)
    assert e.tau() < 1e-300
    s = 2 * 300.0 / (math.sqrt(50) * 40.0)  # replace one: twice one client's bound
    curve = 7 * e.rdp_curve("replace_one", CURVE_ORDERS)
    assert np.allclose(curve, 7 * CURVE_ORDERS * s * s / 2)
    assert curve_epsilon(curve, 1e-5) == pytest.approx(zcdp_epsilon(7 * s * s / 2, 1e-5), rel=1e-4)


def test_tau_inflates_the_bound_for_small_local_noise() -> None:
    lo, hi = ddg(sigma=0.3), ddg(sigma=3.0)
    assert lo.tau() > 1 and hi.tau() < 1e-30
    assert lo.rdp_curve("add_or_remove_one", CURVE_ORDERS)[0] > hi.rdp_curve("add_or_remove_one", CURVE_ORDERS)[0] * 10


def test_replace_one_doubles_the_sensitivity() -> None:
    e = ddg()
    a = np.array([2.0, 10.0])
    assert np.allclose(e.rdp_curve("replace_one", a), 4 * e.rdp_curve("add_or_remove_one", a))


def test_skellam_bound_at_integer_orders_only_and_its_formula() -> None:
    e = SkellamSumEvent(local_variance=100.0, clients=10, l2_bound=20.0, l1_bound=200.0)
    a = np.array([2.0, 2.5, 3.0])
    c = e.rdp_curve("add_or_remove_one", a)
    mu = 1000.0
    want = 2 * 400 / (2 * mu) + min((3 * 400 + 1200) / (4 * mu * mu), 600 / (2 * mu))
    assert c[0] == pytest.approx(want) and math.isinf(c[1]) and math.isfinite(c[2])


def test_ledger_composes_rdp_events_by_their_curve_and_replays() -> None:
    e = ddg(sigma=2.0, n=20)
    led = PrivacyLedger("replace_one")
    led.start([(e, 30)])
    for _ in range(30):
        led.record(e)
    eps = led.epsilon(1e-5)
    assert led.accountant() == "rdp"
    assert eps == pytest.approx(curve_epsilon(30 * e.rdp_curve("replace_one", CURVE_ORDERS), 1e-5))
    assert led.delta(eps) == pytest.approx(1e-5, rel=1e-6)
    assert PrivacyEvent.from_json(e.to_json()) == e
    assert led.report(1e-5)["epsilon_rdp_crosscheck"] is None  # no dp-accounting form: no cross-check claimed


def test_more_rounds_and_less_noise_spend_more() -> None:
    def eps(sigma: float, rounds: int) -> float:
        led = PrivacyLedger("replace_one")
        led.record(ddg(sigma=sigma), rounds)
        return led.epsilon(1e-5)

    assert eps(40, 10) < eps(40, 20) < eps(20, 20)


def test_a_pure_event_composes_with_rdp_events_by_zcdp() -> None:
    led = PrivacyLedger("replace_one")
    led.record(ddg())
    alone = led.epsilon(1e-5)
    led.record(PureDpEvent(0.5))
    assert led.epsilon(1e-5) > alone


def test_a_non_private_event_cannot_join_an_rdp_ledger() -> None:
    led = PrivacyLedger("replace_one")
    led.record(ddg())
    led.record(NonPrivateEvent())
    with pytest.raises(UnsupportedEventError, match="no RDP curve"):
        led.epsilon(1e-5)


def test_no_pld_is_claimed() -> None:
    with pytest.raises(UnsupportedEventError, match="RDP bound"):
        ddg().pld("replace_one", 1e-4)


@pytest.mark.parametrize("bad", [{"local_stddev": 0.0}, {"clients": 0}, {"dim": True}, {"l2_bound": math.inf}])
def test_bad_parameters_are_refused(bad: dict[str, object]) -> None:
    args: dict[str, object] = {"local_stddev": 1.0, "clients": 3, "l2_bound": 1.0, "l1_bound": 1.0, "dim": 4, **bad}
    with pytest.raises(ValueError):
        DistributedDiscreteGaussianEvent(**args)  # type: ignore[arg-type]


def test_curve_conversions_edge_cases() -> None:
    zero = np.zeros_like(CURVE_ORDERS)
    assert curve_epsilon(zero, 1e-5) == 0.0 and curve_delta(zero, 1.0) == 0.0
    assert math.isinf(curve_epsilon(CURVE_ORDERS * 0.1, 0.0))
    assert curve_delta(CURVE_ORDERS * 1e6, 0.1) == 1.0


def test_a_gaussian_event_composes_with_rdp_events_by_its_exact_rdp() -> None:
    from sstq_fl.privacy.events import GaussianEvent

    g = GaussianEvent(2.0)
    assert np.allclose(g.rdp_curve("replace_one", np.array([2.0, 5.0])), np.array([2.0, 5.0]) * 4 / 8)
    led = PrivacyLedger("replace_one")
    led.record(g, 3)
    led.record(ddg())
    want = curve_epsilon(3 * g.rdp_curve("replace_one", CURVE_ORDERS) + ddg().rdp_curve("replace_one", CURVE_ORDERS),
                         1e-5)
    assert led.epsilon(1e-5) == pytest.approx(want)
