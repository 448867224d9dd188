"""Codebooks for SSTQ's one-dimensional quantizer, normalised to ``[-1, 1]`` (multiply by ``B``).

Every codebook ``Γ = (c_1 ≤ … ≤ c_M)`` has ``c_1 = -1``, ``c_M = 1`` and ``Σ c_i = 0``.  All
of them depend only on public parameters ``(ε, M, surrogate law)`` and are cached; the
problems are scale-invariant, so the normalised codebook times ``B`` is the codebook for
bound ``B``.

- :func:`uniform` — ``c_i = -1 + 2(i-1)/(M-1)``.
- :func:`flat_optimized` — the privacy-aware optimum for SSTQ's flat randomized response, the
  surrogate its authors propose: minimise ``L(Γ) = Σ_k Δ_k³/12 + Σ_i c_i² / (e^ε − 1)`` over gaps
  ``Δ_k = c_{k+1} − c_k ≥ 0`` with ``Σ Δ_k = 2`` and ``Σ c_i = 0``.  Strongly convex;
  solved by SLSQP with exact gradients and then verified with :func:`flat_kkt_residual`.
- :func:`metric_aware` — minimises the exact ``E[(Y − c_Z)²]`` of the metric-aware channel
  (SSTQ's truncated-Laplace label channel) under a public surrogate law of ``Y`` over symmetric
  codebooks (torch autograd + L-BFGS); as ``ε → ∞`` it approaches the Panter–Dite allocation,
  codeword density ``∝ f_Y^{1/3}`` (Panter & Dite, Proc. IRE 39(1), 1951).  The objective (exact
  error of the channel rather than a surrogate) and the optimiser are our own choices.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ...lazy import lazy_module
from ...privacy.floats import EXP_SAFE

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")


def _check(eps: float, m: int) -> None:
    if not (isinstance(m, int) and m >= 2):
        raise ValueError(f"codebook size M must be an integer >= 2, got {m}")
    if not (eps > 0):
        raise ValueError(f"epsilon must be > 0, got {eps}")


def uniform(m: int) -> np.ndarray:
    """The uniform grid on ``[-1, 1]`` with ``m`` points."""
    _check(1.0, m)
    return np.linspace(-1.0, 1.0, m)


def flat_objective(c: np.ndarray, eps: float) -> float:
    """The flat-RR surrogate loss ``L(Γ)`` (module doc) of a normalised codebook (``B = 1``)."""
    gaps = np.diff(c)
    return float((gaps**3).sum() / 12.0 + (c**2).sum() / math.expm1(eps))


def _flat_grad_gaps(gaps: np.ndarray, kappa: float) -> np.ndarray:
    c = np.concatenate([[-1.0], -1.0 + np.cumsum(gaps)])
    tail = np.cumsum((2 * kappa * c)[::-1])[::-1]  # Σ_{i>k} 2κ c_i
    return gaps**2 / 4.0 + tail[1:]


@lru_cache(maxsize=64)
def _flat_optimized_cached(eps: float, m: int) -> tuple[float, ...]:
    from scipy.optimize import minimize
    kappa = 1.0 / math.expm1(eps)
    n_gaps = m - 1
    weights = np.arange(n_gaps, 0, -1, dtype=float)  # Σ_i c_i = -m + Σ_k (m-k) Δ_k

    def fun(g: np.ndarray) -> tuple[float, np.ndarray]:
        c = np.concatenate([[-1.0], -1.0 + np.cumsum(g)])
        return (g**3).sum() / 12.0 + kappa * (c**2).sum(), _flat_grad_gaps(g, kappa)

    cons = [
        {"type": "eq", "fun": lambda g: g.sum() - 2.0, "jac": lambda g: np.ones_like(g)},
        {"type": "eq", "fun": lambda g: weights @ g - m, "jac": lambda g: weights},
    ]
    g0 = np.full(n_gaps, 2.0 / n_gaps)
    res = minimize(fun, g0, jac=True, method="SLSQP", bounds=[(0.0, 2.0)] * n_gaps,
                   constraints=cons, options={"ftol": 1e-15, "maxiter": 2000})
    g = np.clip(res.x, 0.0, None)
    g *= 2.0 / g.sum()
    c = np.concatenate([[-1.0], -1.0 + np.cumsum(g)])
    c[-1] = 1.0
    c = 0.5 * (c - c[::-1])  # exact symmetry (the unique optimum is symmetric)
    return tuple(float(v) for v in c)


def flat_optimized(eps: float, m: int) -> np.ndarray:
    """The privacy-aware flat-RR codebook (the minimiser of :func:`flat_objective`), cached by ``(ε, M)``."""
    _check(eps, m)
    if m == 2:
        return np.array([-1.0, 1.0])
    return np.array(_flat_optimized_cached(float(eps), m))


def flat_kkt_residual(c: np.ndarray, eps: float, tol: float = 1e-9) -> float:
    """Largest KKT violation of ``c`` for the flat problem (≈ 0 at the optimum).

    Stationarity ``∇_Δ L + μ 1 + λ w − ν = 0`` with ``ν ≥ 0`` and ``ν_k Δ_k = 0``: the
    multipliers ``(μ, λ)`` are fitted by least squares on the strictly positive gaps, then
    the residual on those gaps and the sign violation of ``ν`` on the zero gaps are
    reported (relative to the gradient's scale).
    """
    gaps = np.diff(c)
    kappa = 1.0 / math.expm1(eps)
    grad = _flat_grad_gaps(gaps, kappa)
    w = np.arange(len(gaps), 0, -1, dtype=float)
    pos = gaps > tol
    a = np.stack([np.ones(pos.sum()), w[pos]], 1)
    mult, *_ = np.linalg.lstsq(a, -grad[pos], rcond=None)
    nu = grad + mult[0] + mult[1] * w
    scale = max(1e-12, float(np.abs(grad).max()))
    viol = np.abs(nu[pos]).max(initial=0.0)
    viol = max(viol, float(np.clip(-nu[~pos], 0, None).max(initial=0.0)))
    return float(viol / scale)


# ---------------------------------------------------------------- metric-aware channel


def paper_scale(eps: float) -> float:
    """SSTQ's authors' Laplace scale ``2 D_B / ε = 4/ε`` (normalised, ``B = 1``; ``D_B = 2`` the codebook
    diameter): the density ratio of two centres ``2`` apart is ``e^{ε/2}`` and the truncation's normaliser
    at most another ``e^{ε/2}``, so the channel is ε-LDP for every codebook, but its exact worst ratio is
    far below ``e^ε``."""
    return 4.0 / eps


def ma_transition(c: torch.Tensor | np.ndarray, eps: float, scale: float | None = None) -> torch.Tensor:
    """Exact channel ``P[i | k]`` of the metric-aware variant (normalised, ``B = 1``).

    ``T ~`` Laplace centred at ``c_k`` with scale ``scale`` (default :func:`paper_scale`, ``4/ε``)
    truncated to ``[-1, 1]``; ``Z`` = index of the cell ``[b_{i-1}, b_i]`` holding ``T`` with
    ``b_i = (c_i + c_{i+1})/2`` (nearest codeword; ties to the smaller index).  Computed
    from closed-form Laplace CDF differences in float64 (differentiable in ``c``).
    """
    c = torch.as_tensor(c, dtype=torch.float64)
    scale = paper_scale(eps) if scale is None else scale
    bounds = _cell_bounds(c)
    g = _trunc_laplace_mass(bounds[None, :], c[:, None], scale)  # [k, M+1]
    p = (g[:, 1:] - g[:, :-1]) / g[:, -1:]
    return p.clamp_min(0.0)


def _cell_bounds(c: torch.Tensor) -> torch.Tensor:
    """``(-1, (c_1+c_2)/2, …, (c_{M-1}+c_M)/2, 1)``: the nearest-codeword cells' edges."""
    return torch.cat([c.new_tensor([-1.0]), 0.5 * (c[1:] + c[:-1]), c.new_tensor([1.0])])


def ma_log_transition(c: np.ndarray, scale: float) -> np.ndarray:
    """``log P[i | k]`` of the channel with Laplace ``scale``, in log space (no underflow).

    The unnormalised mass of ``[l, h]`` under ``e^{-|u-μ|/s}`` is
    ``s e^{-(l-μ)/s}(1 - e^{-(h-l)/s})`` right of ``μ``, the mirror image left of it, and
    ``s (2 - e^{-(μ-l)/s} - e^{-(h-μ)/s})`` across it; an empty cell (tied codewords) gets ``-∞``.
    """
    c = np.asarray(c, dtype=np.float64)
    b = _cell_bounds(torch.from_numpy(c)).numpy()
    lo, hi, mu = b[None, :-1], b[None, 1:], c[:, None]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # the branches np.where discards
        width = np.log(-np.expm1(-(hi - lo) / scale))
        right = -(lo - mu) / scale + width
        left = -(mu - hi) / scale + width
        across = np.log(np.maximum(2 - np.exp(-(mu - lo) / scale) - np.exp(-(hi - mu) / scale), 0.0))
    logm = np.where(lo >= mu, right, np.where(hi <= mu, left, across))
    total = np.log(2 - np.exp(-(mu - -1.0) / scale) - np.exp(-(1.0 - mu) / scale))  # the whole of [-1, 1]
    return logm - total


def ma_worst_log_ratio(c: np.ndarray, scale: float) -> float:
    """``max_{i,k,k'} log(P[i|k] / P[i|k'])`` of the exact channel: its pure-LDP ε (replace-one)."""
    lp = ma_log_transition(c, scale)
    live = np.isfinite(lp).all(0)  # outputs that some label can produce (all can, or none)
    return float((lp[:, live].max(0) - lp[:, live].min(0)).max())


def calibrated_scale(c: np.ndarray, eps: float, rtol: float = 1e-14) -> float:
    """The Laplace scale whose exact channel has worst log-ratio ``ε`` (bisection in ``log s``).

    The worst ratio decreases in the scale (it is ``D/s`` for a codebook constant ``D`` whenever the
    worst pair is two codewords outside the output's cell); :func:`paper_scale` ``4/ε`` is always
    private, and the result is the upper end of the final bracket for the target ``ε(1 − 1e-12)``
    (a margin for the float64 rounding of the matrix built from it), so its worst log-ratio is
    ``≤ ε`` and within ``1e-12 + rtol`` of it.
    Above ``EXP_SAFE`` (ε > 700: the channel is the identity to float64 precision at either scale)
    :func:`paper_scale` is returned.  Calibrating on the exact channel is our own choice.
    """
    hi = paper_scale(eps)
    if eps > EXP_SAFE:
        return hi
    lo, target = hi / 2, eps * (1 - 1e-12)
    while ma_worst_log_ratio(c, lo) <= target:
        hi, lo = lo, lo / 2
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        if ma_worst_log_ratio(c, mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def _trunc_laplace_mass(t: torch.Tensor, mu: torch.Tensor, s: float) -> torch.Tensor:
    """``∫_{-1}^{t} exp(-|u − μ|/s) du`` (closed form; differentiable in ``t`` and ``μ``)."""
    left = torch.exp((-1.0 - mu) / s)
    below = s * (torch.exp((torch.minimum(t, mu) - mu) / s) - left)
    above = s * (1.0 - torch.exp(-(torch.clamp_min(t - mu, 0.0)) / s))
    return below + above


def _law_nodes(law: str, n_per: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes on ``[0, 1]`` (for integrating over each codebook interval)."""
    x, w = np.polynomial.legendre.leggauss(n_per)
    return 0.5 * (x + 1.0), 0.5 * w


def law_density(law: str, y: torch.Tensor, level: float) -> torch.Tensor:
    """Public surrogate density of a normalised coefficient on ``[-1, 1]``.

    ``uniform``: ``1/2``.  ``kashin``: a Gaussian with standard deviation ``1/level``,
    truncated to ``[-1, 1]`` (a coefficient of a full-radius vector is about ``R/√N`` while
    the bound is ``level·R/√N``); it uses public parameters only.
    """
    if law == "uniform":
        return torch.full_like(y, 0.5)
    if law == "kashin":
        sd = 1.0 / level
        z = math.erf(1.0 / (sd * math.sqrt(2.0)))
        return torch.exp(-0.5 * (y / sd) ** 2) / (sd * math.sqrt(2 * math.pi) * z)
    raise ValueError(f"unknown surrogate law {law!r}; choose 'uniform' or 'kashin'")


def ma_expected_error(c: torch.Tensor, eps: float, law: str = "uniform", level: float = 2.35,
                      n_per: int = 6, scale: float | None = None) -> torch.Tensor:
    """Exact ``E[(Y − c_Z)²]`` for ``Y`` ~ ``law`` under stochastic rounding + the MA channel.

    On ``[c_k, c_{k+1}]`` rounding gives ``V = k+1`` w.p. ``θ = (y − c_k)/Δ_k``; the integral
    over each interval uses Gauss–Legendre nodes (exact for the uniform law, whose integrand
    is a cubic polynomial).  ``scale``: the channel's Laplace scale (default :func:`paper_scale`).
    """
    p = ma_transition(c, eps, scale)  # [M, M]
    t, w = (torch.as_tensor(a, dtype=torch.float64) for a in _law_nodes(law, n_per))
    lo, hi = c[:-1], c[1:]
    gap = hi - lo
    y = lo[:, None] + gap[:, None] * t[None, :]  # [M-1, n]
    theta = t[None, :].expand_as(y)
    dens = law_density(law, y, level)
    sq = (y[:, :, None] - c[None, None, :]) ** 2  # [M-1, n, M]
    e_lo = (sq * p[:-1, None, :]).sum(-1)
    e_hi = (sq * p[1:, None, :]).sum(-1)
    integrand = ((1 - theta) * e_lo + theta * e_hi) * dens
    return (integrand * w[None, :]).sum(1).mul(gap).sum()


def ma_gain(c: torch.Tensor, p: torch.Tensor, law: str = "uniform", level: float = 2.35, n_per: int = 6) -> float:
    """Least-squares slope ``κ = ∫ y m(y) f(y) dy / ∫ y² f(y) dy`` of the channel's mean response
    ``m(y) = E[c_Z | y]`` (stochastic rounding makes it linear between codewords: ``(1−θ)(Pc)_k + θ(Pc)_{k+1}``)
    under the public surrogate law ``f``; ``B c_Z / κ`` removes identity decoding's first-order shrinkage."""
    c, p = torch.as_tensor(c, dtype=torch.float64), torch.as_tensor(p, dtype=torch.float64)
    mean = p @ c
    t, w = (torch.as_tensor(a, dtype=torch.float64) for a in _law_nodes(law, n_per))
    gap = (c[1:] - c[:-1])[:, None]
    y = c[:-1, None] + gap * t[None, :]
    my = (1 - t) * mean[:-1, None] + t * mean[1:, None]
    dens = law_density(law, y, level) * w[None, :] * gap
    return float((y * my * dens).sum() / (y * y * dens).sum())


def _symmetric_from_logits(z: torch.Tensor, m: int) -> torch.Tensor:
    w = torch.softmax(z, 0)  # m//2 weights: m//2 - 1 left gaps and half the middle gap
    left = -1.0 + torch.cumsum(torch.cat([w.new_zeros(1), w[:-1]]), 0)  # c_1..c_{m/2}
    return torch.cat([left, -left.flip(0)])


def _optimize_metric_aware(eps: float, m: int, law: str, level: float, scale: float) -> np.ndarray:
    """L-BFGS over symmetric codebooks of :func:`ma_expected_error` for a fixed channel scale."""
    half = m // 2
    start = np.full(half, 2.0 / (m - 1))
    start[-1] = 1.0 / (m - 1)
    z = torch.tensor(np.log(start), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([z], lr=1.0, max_iter=500, tolerance_grad=1e-12,
                            tolerance_change=1e-15, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = ma_expected_error(_symmetric_from_logits(z, m), eps, law, level, scale=scale)
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return _symmetric_from_logits(z, m).numpy()


@lru_cache(maxsize=64)
def _metric_aware_cached(eps: float, m: int, law: str, level: float, scale: str) -> tuple[float, ...]:
    """``scale='paper'``: optimise for the ``4/ε`` channel.  ``'exact'``: alternate optimising the codebook
    for a scale and recalibrating the scale for the codebook (:func:`calibrated_scale`), from :func:`paper_scale`,
    three rounds (the scale then moves by < 1e-3 relative; the pair used by an encoder is always
    recalibrated for the final codebook, so privacy never depends on this fixed point)."""
    s = paper_scale(eps)
    c = _optimize_metric_aware(eps, m, law, level, s)
    for _ in range(3 if scale == "exact" else 0):
        s = calibrated_scale(c, eps)
        c = _optimize_metric_aware(eps, m, law, level, s)
    return tuple(float(v) for v in c)


def metric_aware(eps: float, m: int, law: str = "uniform", level: float = 2.35, scale: str = "paper") -> np.ndarray:
    """Codebook minimising the MA channel's exact error under a public ``law`` (cached), for the
    channel at :func:`paper_scale` or at the calibrated one (``scale='exact'``)."""
    _check(eps, m)
    if m % 2:
        raise ValueError(f"metric-aware codebooks need an even M, got {m}")
    if scale not in ("paper", "exact"):
        raise ValueError(f"metric-aware channel scale must be 'paper' or 'exact', got {scale!r}")
    if m == 2:
        return np.array([-1.0, 1.0])
    return np.array(_metric_aware_cached(float(eps), m, law, float(level), scale))
