import math

import dp_accounting
import pytest

from sstq_fl.privacy.events import GaussianEvent, PublicDataEvent, PureDpEvent
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.pure_composition import pure_composition_epsilon
from sstq_fl.privacy.rdp import pure_rho, rdp_epsilon, zcdp_epsilon

CASES = [(e0, k, d) for e0 in (0.05, 0.5, 1.0, 3.0, 8.0) for k in (1, 10, 100, 1000) for d in (1e-3, 1e-5, 1e-10)]


def _dp_accounting_zcdp(rho: float, delta: float) -> tuple[float, float]:
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.ZCDpEvent(rho))
    eps, order = acc.get_epsilon_and_optimal_order(delta)
    return float(eps), float(order)


@pytest.mark.parametrize("e0,k,delta", CASES)
def test_closed_form_is_dp_accountings_conversion_at_its_best_and_a_valid_bound(e0, k, delta):
    """At most dp-accounting's RDP figure for the same ρ (the same conversion over more orders), within
    0.2 % of it where its optimal order lies where its grid is fine relative to α − 1 (2 to 50), and at
    least the exact optimal composition (Kairouz, Oh & Viswanath), below which no valid bound can be."""
    rho = k * e0**2 / 2
    ours, (ref, order) = zcdp_epsilon(rho, delta), _dp_accounting_zcdp(rho, delta)
    assert ours <= ref * (1 + 1e-12)
    assert ours >= pure_composition_epsilon(e0, k, delta) * (1 - 1e-12)
    if 2 <= order <= 50:
        assert ours == pytest.approx(ref, rel=2e-3)
    assert ours <= rho + 2 * math.sqrt(rho * math.log(1 / delta))  # Bun & Steinke, Prop. 1.3: looser


def test_the_conversion_edges():
    assert zcdp_epsilon(0.0, 1e-5) == 0.0
    assert zcdp_epsilon(1.0, 0.0) == math.inf
    assert zcdp_epsilon(math.inf, 1e-5) is None
    assert zcdp_epsilon(1e-12, 1e-5) == 0.0  # δ² ≥ 1 − e^{−ρ}: total variation at most δ
    assert zcdp_epsilon(1e-4, 1e-3) > 0.0  # δ² < 1 − e^{−ρ}: no such shortcut
    assert zcdp_epsilon(5e6, 1e-5) == pytest.approx(5e6 * 1.01, rel=1e-3)  # huge ρ: the least order, finite


def test_a_pure_ledger_is_answered_in_closed_form_and_any_other_by_dp_accounting():
    events = [(PureDpEvent(3.0), 10), (PublicDataEvent(), 1), (PureDpEvent(1.0), 4)]
    assert pure_rho(events) == pytest.approx(10 * 4.5 + 4 * 0.5)
    assert rdp_epsilon(events, "replace_one", 1e-5) == zcdp_epsilon(47.0, 1e-5)
    mixed = [*events, (GaussianEvent(2.0), 3)]
    assert pure_rho(mixed) is None
    acc = dp_accounting.rdp.RdpAccountant()
    for event, count in mixed:
        acc.compose(event.rdp("replace_one"), count)
    assert rdp_epsilon(mixed, "replace_one", 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)


def test_the_ledger_reports_the_closed_form():
    led = PrivacyLedger("replace_one")
    led.record(PureDpEvent(3.0), 100)
    assert led.report(1e-5)["epsilon_rdp_crosscheck"] == zcdp_epsilon(450.0, 1e-5)
    assert led.epsilon(1e-5) < led.rdp_epsilon(1e-5)  # the exact composition is tighter than RDP


def test_no_figure_for_a_delta_outside_the_unit_interval():
    assert zcdp_epsilon(1.0, -1e-5) is None and zcdp_epsilon(1.0, math.nan) is None and zcdp_epsilon(1.0, 1.0) is None
