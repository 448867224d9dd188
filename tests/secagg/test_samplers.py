"""The discrete Gaussian and Skellam samplers against their exact laws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sstq_fl.secagg.samplers import (
    discrete_gaussian,
    discrete_gaussian_pmf,
    discrete_gaussian_variance,
    skellam,
)

DRAWS = 200_000


def chi_square_p(draws: np.ndarray, pmf: np.ndarray, support: np.ndarray) -> float:
    """Pearson's chi-square p-value of ``draws`` against ``pmf`` on ``support``, tails merged into the outer
    bins so that every bin expects at least 5 draws."""
    expected = pmf * draws.size
    keep = np.flatnonzero(expected >= 5)
    lo, hi = support[keep[0]], support[keep[-1]]
    counts = np.bincount(np.clip(draws, lo, hi) - lo, minlength=hi - lo + 1).astype(float)
    exp = expected[keep[0] : keep[-1] + 1].copy()
    exp[0] += expected[: keep[0]].sum()
    exp[-1] += expected[keep[-1] + 1 :].sum()
    exp *= draws.size / exp.sum()
    return float(stats.chisquare(counts, exp).pvalue)


def exact_law(sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Support and exact pmf of N_Z(0, σ²), wide enough to hold all but ~1e-30 of the mass."""
    r = int(math.ceil(12 * sigma)) + 3
    support = np.arange(-r, r + 1)
    return support, discrete_gaussian_pmf(sigma, support)


@pytest.mark.parametrize("sigma", [0.5, 2.0, 20.0])
def test_discrete_gaussian_matches_its_pmf(sigma: float) -> None:
    draws = discrete_gaussian(sigma, DRAWS, np.random.default_rng(11))
    support, pmf = exact_law(sigma)
    assert draws.dtype == np.int64 and draws.shape == (DRAWS,)
    assert chi_square_p(draws, pmf, support) > 1e-4
    freq = np.array([(draws == x).mean() for x in support])
    assert np.max(np.abs(freq - pmf)) < 5 * math.sqrt(pmf.max() / DRAWS)


@pytest.mark.parametrize("sigma", [0.5, 2.0, 20.0])
def test_discrete_gaussian_moments(sigma: float) -> None:
    draws = discrete_gaussian(sigma, DRAWS, np.random.default_rng(12)).astype(float)
    var = discrete_gaussian_variance(sigma)
    support, pmf = exact_law(sigma)
    fourth = float(np.sum(support.astype(float) ** 4 * pmf))
    assert abs(draws.mean()) < 5 * math.sqrt(var / DRAWS)
    assert abs(draws.var() - var) < 5 * math.sqrt((fourth - var**2) / DRAWS)


def test_exact_variance_is_just_below_sigma_squared() -> None:
    assert discrete_gaussian_variance(0.5) < 0.25
    assert discrete_gaussian_variance(3.0) == pytest.approx(9.0, rel=1e-12)
    assert discrete_gaussian_pmf(2.0, np.arange(-100, 101)).sum() == pytest.approx(1.0, abs=1e-12)


def test_chi_square_detects_a_rounded_continuous_gaussian() -> None:
    """The fit test has power: a rounded continuous Gaussian is a different law at σ = 0.5."""
    rng = np.random.default_rng(13)
    wrong = np.rint(rng.normal(0, 0.5, DRAWS)).astype(np.int64)
    support, pmf = exact_law(0.5)
    assert chi_square_p(wrong, pmf, support) < 1e-6


def test_discrete_gaussian_shapes_seeds_and_edge_cases() -> None:
    a = discrete_gaussian(3.0, (4, 5), np.random.default_rng(1))
    b = discrete_gaussian(3.0, (4, 5), np.random.default_rng(1))
    assert a.shape == (4, 5) and np.array_equal(a, b)
    assert not np.array_equal(a, discrete_gaussian(3.0, (4, 5), np.random.default_rng(2)))
    assert np.array_equal(discrete_gaussian(0.0, 7, np.random.default_rng(1)), np.zeros(7, np.int64))
    assert not discrete_gaussian(1e-6, 1000, np.random.default_rng(1)).any()
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            discrete_gaussian(bad, 3, np.random.default_rng(0))


@pytest.mark.parametrize("mu", [0.3, 4.0, 1000.0])
def test_skellam_mean_and_variance(mu: float) -> None:
    draws = skellam(mu, DRAWS, np.random.default_rng(21)).astype(float)
    assert abs(draws.mean()) < 5 * math.sqrt(mu / DRAWS)
    # Sk(μ) has fourth central moment 3μ² + μ, so the sample variance has variance ≈ (2μ² + μ)/N.
    assert abs(draws.var() - mu) < 5 * math.sqrt((2 * mu * mu + mu) / DRAWS)


def test_skellam_pmf_and_edge_cases() -> None:
    mu = 3.0
    draws = skellam(mu, DRAWS, np.random.default_rng(22))
    support = np.arange(-30, 31)
    pmf = stats.skellam.pmf(support, mu / 2, mu / 2)
    assert chi_square_p(draws, pmf, support) > 1e-4
    assert skellam(0.0, (2, 3), np.random.default_rng(0)).shape == (2, 3)
    with pytest.raises(ValueError):
        skellam(-1.0, 3, np.random.default_rng(0))
