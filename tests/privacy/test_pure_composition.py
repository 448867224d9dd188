"""The exact pure composition (Kairouz, Oh & Viswanath) agrees with the closed form of one release."""

import math

import pytest

from sstq_fl.privacy.pure_composition import pure_composition_delta, pure_composition_epsilon


def test_one_release_has_the_closed_form_delta_and_epsilon():
    eps0 = 2.0
    for eps in (0.0, 0.5, 1.9):  # one ε₀-DP release (binary randomized response): δ(ε) = (e^ε₀ − e^ε)/(1 + e^ε₀)
        assert pure_composition_delta(eps0, 1, eps) == pytest.approx((math.exp(eps0) - math.exp(eps)) / (1 + math.exp(eps0)))
    assert pure_composition_epsilon(eps0, 1, 1e-9) == pytest.approx(math.log(math.exp(eps0) - 1e-9 * (1 + math.exp(eps0))))


@pytest.mark.parametrize("k", [1, 3, 100, 30_000])
@pytest.mark.parametrize("p", [0.0, 1e-300, 1e-9, 0.2, 0.5, 0.93, 1.0])
def test_binomial_terms_equal_scipys(k, p):
    """The log-gamma terms against scipy.stats' binomial log-pmf: the same points of mass (−∞ where it
    has none, exactly), and within 1e-10 of max(1, |log P|) elsewhere."""
    import numpy as np
    from scipy import stats

    from sstq_fl.privacy.pure_composition import log_binom_pmf

    j = np.arange(k + 1)
    ours, ref = log_binom_pmf(j, k, p), stats.binom.logpmf(j, k, p)
    assert np.array_equal(np.isfinite(ours), np.isfinite(ref)) and np.all(ours[~np.isfinite(ref)] == -np.inf)
    fin = np.isfinite(ref)
    assert np.all(np.abs(ours[fin] - ref[fin]) <= 1e-10 * np.maximum(1.0, np.abs(ref[fin])))
