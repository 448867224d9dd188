"""Exact confidence bounds the kit's checks rest on.

Clopper–Pearson intervals (Clopper & Pearson, "The use of confidence or fiducial limits illustrated in
the case of the binomial", Biometrika 26(4), 1934) bound a binomial probability from ``k`` successes in
``n`` trials; each one-sided bound holds with probability at least ``1 − a`` for every true probability.
The privacy audit turns two of them into a lower bound on ε (Jagielski, Ullman, Oprea, "Auditing
differentially private machine learning: how private is private SGD?", NeurIPS 2020, §3).
"""

from __future__ import annotations

import math

from scipy import stats


def cp_lower(k: int, n: int, a: float) -> float:
    """One-sided ``1 − a`` Clopper–Pearson lower bound on ``p`` from ``k`` of ``n`` (0 when ``k = 0``)."""
    return 0.0 if k <= 0 else float(stats.beta.ppf(a, k, n - k + 1))


def cp_upper(k: int, n: int, a: float) -> float:
    """One-sided ``1 − a`` Clopper–Pearson upper bound on ``p`` from ``k`` of ``n`` (1 when ``k = n``)."""
    return 1.0 if k >= n else float(stats.beta.isf(a, k + 1, n - k))


def epsilon_lower_bound(k_in: int, k_out: int, n: int, a: float) -> float:
    """Lower bound on ``log(P(E|x)/P(E|x'))`` from ``k_in`` of ``n`` messages for ``x`` and ``k_out`` of ``n``
    for ``x'`` in an event ``E`` chosen independently of them; it holds with probability ``≥ 1 − 2a``."""
    lo, hi = cp_lower(k_in, n, a), cp_upper(k_out, n, a)
    return -math.inf if lo <= 0 else math.log(lo / hi)


def two_sided_z(alpha: float, tests: int) -> float:
    """The normal quantile of a two-sided test at level ``alpha / tests`` (Bonferroni)."""
    return float(stats.norm.isf(alpha / (2 * max(tests, 1))))


def chi_square_pvalue(counts: list[int] | object, expected: object) -> tuple[float, int]:
    """Pearson's goodness-of-fit p-value and degrees of freedom; cells expecting fewer than 5 are pooled."""
    import numpy as np

    obs, exp = np.asarray(counts, float), np.asarray(expected, float)
    small = exp < 5
    if small.any():
        obs = np.append(obs[~small], obs[small].sum())
        exp = np.append(exp[~small], exp[small].sum())
    keep = exp > 0
    if (obs[~keep] > 0).any():
        return 0.0, int(keep.sum()) - 1
    obs, exp = obs[keep], exp[keep]
    dof = max(len(obs) - 1, 1)
    stat = float(((obs - exp) ** 2 / exp).sum())
    return float(stats.chi2.sf(stat, dof)), dof
