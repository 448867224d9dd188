"""Pure ε-DP accounting in closed form: exact optimal composition and amplification by sampling.

A ledger holding only runs of one pure ε₀-DP mechanism (an LDP training run) is answered by
the exact optimal composition of Kairouz, Oh & Viswanath (ICML 2015, Thm. 3.3), in ``O(k)`` and
with no discretisation; a Poisson-subsampled pure event is amplified in closed form (Balle,
Barthe & Gaboardi, NeurIPS 2018, Thm. 8).
"""

from __future__ import annotations

import math

import numpy as np

from .floats import EXP_SAFE

KOV_WINDOW_FROM = 100_000  # above this many rounds the exact pure composition sums a window


def amplified_pure_epsilon(epsilon: float, q: float) -> float:
    """``ε' = log(1 + q (e^ε − 1))``: a Poisson(q)-subsampled ε-DP mechanism is ε'-DP against
    an observer who does not learn whether the individual was sampled (Balle, Barthe &
    Gaboardi, NeurIPS 2018, Thm. 8, by advanced joint convexity; for local randomizers it needs
    the absent individual's view to be that of a message on a public null input).

    Above :data:`~sstq_fl.privacy.floats.EXP_SAFE`, where ``e^ε`` overflows, the same value is
    computed as ``ε + log(q + (1 − q) e^{−ε})``."""
    if epsilon <= EXP_SAFE:
        return math.log1p(q * math.expm1(epsilon))
    return epsilon + math.log(q + (1 - q) * math.exp(-epsilon))


def _kov_terms(eps0: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``j`` and ``log P(j)`` for ``j ~ Bin(k, 1/(1+e^{ε₀}))`` (the terms of δ(ε) below).

    For ``k`` above 10^5 only ``|j − k p| ≤ 20√k`` is kept: by Hoeffding every other term has
    probability below ``e^{-800}``, which is exactly 0 in float64, so the sum is unchanged.
    ``1/(1+e^{ε₀})`` is computed as ``e^{−ε₀}/(1+e^{−ε₀})`` above ``EXP_SAFE``.
    """
    p = 1 / (1 + math.exp(eps0)) if eps0 <= EXP_SAFE else math.exp(-eps0) / (1 + math.exp(-eps0))
    if k > KOV_WINDOW_FROM:
        half = 20 * math.sqrt(k)
        j = np.arange(max(0, math.floor(k * p - half)), min(k, math.ceil(k * p + half)) + 1)
    else:
        j = np.arange(k + 1)
    return j, log_binom_pmf(j, k, p)


def log_binom_pmf(j: np.ndarray, k: int, p: float) -> np.ndarray:
    """``log P(j)`` for ``j ~ Bin(k, p)``: ``log C(k, j) + j log p + (k − j) log(1 − p)``, ``log C`` by
    log-gamma (``math.lgamma``; scipy.special takes 0.2 s to load) and ``0 · log 0 = 0`` (``p = 0``
    or ``1``: a point mass)."""
    lg = math.lgamma
    log_choose = lg(k + 1) - (np.fromiter((lg(x + 1) for x in j.tolist()), float, j.size)
                              + np.fromiter((lg(k - x + 1) for x in j.tolist()), float, j.size))
    with np.errstate(divide="ignore", invalid="ignore"):
        succ = np.where(j > 0, j * np.log(p), 0.0)
        fail = np.where(j < k, (k - j) * np.log1p(-p), 0.0)
    return log_choose + succ + fail


def _kov_delta(eps0: float, k: int, terms: tuple[np.ndarray, np.ndarray], eps: float) -> float:
    j, logp = terms
    loss = eps0 * (k - 2 * j)
    m = loss > eps
    return float(np.sum(np.exp(logp[m]) * -np.expm1(eps - loss[m])))


def pure_composition_delta(eps0: float, k: int, eps: float) -> float:
    """Exact ``δ(ε)`` of ``k``-fold composition of ε₀-DP (Kairouz, Oh & Viswanath, ICML 2015, Thm. 3.3).

    The tight dominating pair is ``k``-fold binary randomized response: the privacy loss is
    ``L_j = ε₀ (k − 2j)`` with ``j ~ Bin(k, 1/(1+e^{ε₀}))``, and
    ``δ(ε) = Σ_{L_j > ε} P(j) (1 − e^{ε − L_j})``.
    """
    return _kov_delta(eps0, k, _kov_terms(eps0, k), eps)


def pure_composition_epsilon(eps0: float, k: int, delta: float) -> float:
    """Smallest ε with ``δ(ε) ≤ delta`` for ``k``-fold ε₀-DP composition (bisection, 1e-12).

    ``O(k)`` once (the binomial terms), then ``O(k)`` per bisection step."""
    if k == 0:
        return 0.0
    terms = _kov_terms(eps0, k)
    lo, hi = 0.0, eps0 * k
    if _kov_delta(eps0, k, terms, 0.0) <= delta:
        return 0.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if _kov_delta(eps0, k, terms, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi
