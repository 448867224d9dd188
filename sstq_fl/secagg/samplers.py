"""Integer noise for distributed DP: the discrete Gaussian and the Skellam distribution.

Both samplers draw every random number from the ``numpy.random.Generator`` they are handed, in an order
fixed by ``(sigma or mu, size)`` alone, so a caller that hands each client's share its own slice of one
generator's stream gets the same draws whichever way the clients are batched (the codec relies on this).

* The discrete Gaussian ``N_Z(0, σ²)``, ``P[X = x] ∝ exp(−x²/(2σ²))`` on the integers, is sampled by the
  rejection scheme of Canonne, Kamath & Steinke ("The Discrete Gaussian for Differential Privacy",
  NeurIPS 2020, Alg. 3): a discrete Laplace proposal ``P[Y = y] ∝ exp(−|y|/t)`` with ``t = ⌊σ⌋ + 1``,
  accepted with probability ``exp(−(|Y| − σ²/t)²/(2σ²))``.  The proposal is a difference of two i.i.d.
  geometric variables (their Alg. 2 draws the same law).  The scheme is exact in distribution; here the
  acceptance probability and the geometric draws are evaluated in float64 rather than with the paper's
  exact rational arithmetic, so the law is exact up to float64 rounding of those probabilities.
* The Skellam distribution ``Sk(μ)`` is ``Poisson(μ/2) − Poisson(μ/2)``: mean 0, variance ``μ``
  (Agarwal, Kairouz & Liu, "The Skellam Mechanism for Differentially Private Federated Learning",
  NeurIPS 2021, Sec. 3).  It is closed under summation: ``Σ_i Sk(μ_i) = Sk(Σ_i μ_i)``.
"""

from __future__ import annotations

import math

import numpy as np

# Proposals drawn per wanted sample in one batch of the rejection loop (the acceptance rate of the
# scheme with t = ⌊σ⌋ + 1 is above 0.4 for every σ, so most calls finish in one or two batches).
_OVERSAMPLE = 2.5
_MIN_BATCH = 64


def _as_size(size: int | tuple[int, ...]) -> tuple[int, ...]:
    """``size`` as a shape tuple."""
    return (int(size),) if isinstance(size, int | np.integer) else tuple(int(s) for s in size)


def discrete_laplace(t: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` i.i.d. draws of the discrete Laplace law ``P[Y = y] = (1 − e^{−1/t})/(1 + e^{−1/t}) · e^{−|y|/t}``
    as ``G₁ − G₂`` with ``G₁, G₂`` i.i.d. geometric of success probability ``1 − e^{−1/t}`` (Canonne, Kamath
    & Steinke, NeurIPS 2020, the law of their Alg. 2); int64.  Draws all of ``G₁``, then all of ``G₂``."""
    p = -math.expm1(-1.0 / t)
    g1 = rng.geometric(p, size=count)
    g2 = rng.geometric(p, size=count)
    return (g1 - g2).astype(np.int64)


def discrete_gaussian(sigma: float, size: int | tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Draws of ``N_Z(0, σ²)`` (int64, shape ``size``; all zeros when ``σ = 0``) by discrete Laplace
    proposals with ``t = ⌊σ⌋ + 1`` accepted with probability ``exp(−(|Y| − σ²/t)²/(2σ²))`` (Canonne, Kamath
    & Steinke, NeurIPS 2020, Alg. 3), vectorized: batches of proposals until ``prod(size)`` are accepted,
    kept in the order drawn."""
    if not (sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f"discrete_gaussian: sigma must be finite and >= 0, got {sigma}")
    shape = _as_size(size)
    want = math.prod(shape)
    if sigma == 0 or want == 0:
        return np.zeros(shape, dtype=np.int64)
    t = math.floor(sigma) + 1
    sq = sigma * sigma
    kept: list[np.ndarray] = []
    have = 0
    while have < want:
        y = discrete_laplace(t, max(_MIN_BATCH, math.ceil(_OVERSAMPLE * (want - have))), rng)
        accept = rng.random(y.size) < np.exp(-np.square(np.abs(y) - sq / t) / (2 * sq))
        kept.append(y[accept])
        have += kept[-1].size
    return np.concatenate(kept)[:want].reshape(shape)


def skellam(mu: float, size: int | tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Draws of ``Sk(μ) = Poisson(μ/2) − Poisson(μ/2)`` (variance ``μ``; Agarwal, Kairouz & Liu,
    NeurIPS 2021, Sec. 3), int64 of shape ``size``: all of the first Poisson array, then the second."""
    if not (mu >= 0 and math.isfinite(mu)):
        raise ValueError(f"skellam: mu must be finite and >= 0, got {mu}")
    shape = _as_size(size)
    a = rng.poisson(mu / 2, size=shape)
    b = rng.poisson(mu / 2, size=shape)
    return (a - b).astype(np.int64)


def discrete_gaussian_support(sigma: float) -> np.ndarray:
    """Integers ``|x| ≤ ⌈40σ⌉ + 2``: outside them ``exp(−x²/(2σ²)) < e^{−800}``, below float64's range."""
    r = math.ceil(40 * sigma) + 2
    return np.arange(-r, r + 1, dtype=np.int64)


def discrete_gaussian_pmf(sigma: float, xs: np.ndarray) -> np.ndarray:
    """``P[X = x]`` of ``N_Z(0, σ²)`` at ``xs``: ``exp(−x²/(2σ²)) / Σ_{y∈Z} exp(−y²/(2σ²))``, the normalizer
    summed over :func:`discrete_gaussian_support` (exact in float64)."""
    if sigma <= 0:
        return (np.asarray(xs) == 0).astype(float)
    support = discrete_gaussian_support(sigma).astype(float)
    norm = float(np.sum(np.exp(-np.square(support) / (2 * sigma * sigma))))
    return np.exp(-np.square(np.asarray(xs, dtype=float)) / (2 * sigma * sigma)) / norm


def discrete_gaussian_variance(sigma: float) -> float:
    """``Var N_Z(0, σ²) = Σ x² P[X = x]``, which is below ``σ²`` (Canonne, Kamath & Steinke, NeurIPS 2020)
    and within about ``e^{−2π²σ²}`` relative of it for ``σ ≥ 1``: from ``σ = 8`` on (relative ``10⁻⁵⁴⁸``) it is
    ``σ²``, without the sum over about ``80σ`` integers."""
    if sigma <= 0:
        return 0.0
    if sigma >= 8:
        return float(sigma) ** 2
    support = discrete_gaussian_support(sigma)
    return float(np.sum(np.square(support.astype(float)) * discrete_gaussian_pmf(sigma, support)))
