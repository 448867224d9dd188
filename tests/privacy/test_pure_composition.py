"""The exact pure composition (Kairouz, Oh & Viswanath) agrees with the closed form of one release."""

import math

import pytest

from sstq_fl.privacy.pure_composition import pure_composition_delta, pure_composition_epsilon


def test_one_release_has_the_closed_form_delta_and_epsilon():
    eps0 = 2.0
    for eps in (0.0, 0.5, 1.9):  # one ε₀-DP release (binary randomized response): δ(ε) = (e^ε₀ − e^ε)/(1 + e^ε₀)
        assert pure_composition_delta(eps0, 1, eps) == pytest.approx((math.exp(eps0) - math.exp(eps)) / (1 + math.exp(eps0)))
    assert pure_composition_epsilon(eps0, 1, 1e-9) == pytest.approx(math.log(math.exp(eps0) - 1e-9 * (1 + math.exp(eps0))))
