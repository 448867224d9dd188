"""PrivUnitG (Asi, Feldman & Talwar, "Optimal algorithms for mean estimation under local differential
privacy", ICML 2022, §4): PrivUnit with the uniform law on the sphere replaced by a Gaussian.

**Mechanism.**  The unit direction ``u = x/‖x‖`` (``e₁`` for ``x = 0``) is kept w.p. ``(1 + ‖x‖/R)/2`` and
flipped to ``−u`` otherwise (the sign-flip trick of :mod:`.privunit`, so ``E[±u] = x/R``).  With
``g ~ N(0, I_d)`` and ``g_⊥ = g − ⟨g, u⟩u``, the client sends ``R σ (g_⊥ + t u)`` (float32, ``32·d`` bits),
where ``t ~ N(0, 1)`` conditioned on ``t ≥ γ`` w.p. ``p`` and on ``t < γ`` w.p. ``1 − p``.  With
``q = P(N(0,1) ≥ γ)`` the cap is set by ``p(1−q)/(q(1−p)) = e^ε`` and ``σ = 1/E[t]``, where
``E[t] = φ(γ)(p/q − (1−p)/(1−q)) = φ(γ)(1 − e^{−ε}) p/q``; so ``E[x̂] = clip(x)`` (``unbiased``).

**Privacy (exact).**  ``z = g_⊥ + t u`` has density ``φ_d(z) · p/q`` on ``{⟨z, u⟩ ≥ γ}`` and
``φ_d(z) · (1−p)/(1−q)`` off it (``g_⊥`` and ``t`` are independent, ``g_⊥`` is the standard Gaussian of
``u^⊥``).  For two inputs the density ratio of any output is therefore at most
``(p/q)/((1−p)/(1−q)) = e^ε``, attained on ``{⟨z, u⟩ ≥ γ > ⟨z, u'⟩}``; the sign-flip mixture and the
public scaling by ``Rσ`` keep it.  As in :mod:`.privunit` the argument is about the ideal sampler; the
float64 one draws 53-bit uniforms, which truncate the tails at probability ``2⁻⁵³``.

**Calibration.**  ``p`` maximises ``E[t]`` (minimises ``σ``, the authors' objective: the ``d − 1``
Gaussian directions dominate the error), by a bounded 1-D search (Brent) in ``logit p`` started from
a grid; the authors take the best of the grid ``p ∈ {0.01, …, 0.99}``.  Everything is in log space
(``log q``, ``γ = −Φ⁻¹(q)`` by ``ndtri_exp``), so ``q`` as small as ``e^{−ε}`` causes no cancellation.

**Sampling.**  ``t`` by the inverse CDF in log space, exact and without a loop: above the cap
``t = −Φ⁻¹(q·v)``, below it ``t = Φ⁻¹(Φ(γ)·v)``, ``v ∈ (0, 1)`` uniform.  (The authors draw the
below-cap branch by 25 rejection tries and, when all fail, print ``failure`` and send ``σg``.)

**MSE (exact).**  ``E[t²] = 1 + γ E[t] = 1 + γ/σ`` (truncated-normal second moments), hence
``E‖x̂ − clip(x)‖² = R²σ²(d − 1 + E[t²]) − ‖clip(x)‖² = R²(dσ² + γσ) − ‖clip(x)‖²``.

**Wire check.**  Every output has positive density, but the sampler's draws are bounded (a Box–Muller
radius is at most ``√(2·53·ln 2)``, ``|t|`` at most its 53-bit inverse-CDF extreme), so a message longer
than :func:`norm_bound` cannot come from an honest client and is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from .base import Encoder, Field, Messages, Param, WireError, register_encoder

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

MAX_EPSILON = 30.0
"""Largest per-message ε PrivUnitG is calibrated for.  The cap ``P(N(0,1) ≥ γ)`` is ``4.5·10⁻¹²`` at ε = 30,
still far above the ``2⁻⁵³ ≈ 1.1·10⁻¹⁶`` resolution of the 53-bit uniforms that place ``t`` on either side of
``γ``; from ε ≈ 37 it falls below it, so construction refuses ε above 30 (the repository's common cap)."""

HALF_ULP = 2.0**-54
"""Offset making a 53-bit uniform ``k/2^53`` a midpoint in ``(0, 1)``: no ``log 0``, no ``t = γ``."""

BOX_MULLER_RADIUS2 = 2 * 53 * math.log(2)
"""Largest squared Box–Muller radius :func:`sstq_fl.rng.normal` can produce (its uniforms are ``≤ 1 − 2⁻⁵³``)."""


@dataclass(frozen=True)
class Calibration:
    """PrivUnitG's constants at ``epsilon``: cap coin ``p``, threshold ``γ``, scale ``σ`` and ``log q``."""

    epsilon: float
    p: float
    gamma: float
    sigma: float
    log_q: float

    @property
    def second_moment(self) -> float:
        """``E[t²] = 1 + γ/σ``."""
        return 1.0 + self.gamma / self.sigma

    def exact_epsilon(self) -> float:
        """``log(p/(1−p)) + log((1−q)/q)``: the realised density ratio of the cap and its complement."""
        log_1mq = math.log(-math.expm1(self.log_q))
        return math.log(self.p) - math.log1p(-self.p) + log_1mq - self.log_q

    def mse_scale(self, d: int) -> float:
        """``E‖z‖²`` of ``z = σ(g_⊥ + t u)`` in ``R^d``: ``σ²(d − 1 + E[t²]) = dσ² + γσ``."""
        return d * self.sigma**2 + self.gamma * self.sigma


def log_cap(p: float, epsilon: float) -> float:
    """``log q`` with ``p(1−q)/(q(1−p)) = e^ε``: ``q = p/(p + e^ε(1−p))``."""
    lp, l1p = math.log(p), math.log1p(-p)
    return lp - float(np.logaddexp(lp, epsilon + l1p))


def gamma_sigma(p: float, epsilon: float) -> tuple[float, float]:
    """``(γ, σ)`` for cap coin ``p`` (the authors' ``get_gamma_sigma``, in log space)."""
    from scipy import special
    lq = log_cap(p, epsilon)
    gamma = -float(special.ndtri_exp(lq))
    log_mean = -0.5 * gamma * gamma - 0.5 * math.log(2 * math.pi) + math.log(-math.expm1(-epsilon)) + math.log(p) - lq
    return gamma, math.exp(-log_mean)


@lru_cache(maxsize=256)
def calibrate(epsilon: float) -> Calibration:
    """The ``p`` minimising ``σ``: a grid over ``logit p ∈ [−4, 16]``, then Brent in the best grid cell."""
    from scipy.optimize import minimize_scalar

    def log_sigma(s: float) -> float:
        return math.log(gamma_sigma(1.0 / (1.0 + math.exp(-s)), epsilon)[1])

    grid = np.linspace(-4.0, 16.0, 201)
    i = int(np.argmin([log_sigma(float(s)) for s in grid]))
    lo, hi = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, grid.size - 1)])
    res = minimize_scalar(log_sigma, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    s = min((float(res.x), float(grid[i])), key=log_sigma)
    p = 1.0 / (1.0 + math.exp(-s))
    gamma, sigma = gamma_sigma(p, epsilon)
    return Calibration(float(epsilon), p, gamma, sigma, log_cap(p, epsilon))


def sample_t(cal: Calibration, coin: np.ndarray) -> np.ndarray:
    """``t`` from uniforms ``coin`` ``[n, 2]``: above the cap w.p. ``p`` (column 0), at level column 1.

    Each branch is clamped to its side of ``γ`` (rounding could put a level within ``2⁻⁵³`` of ``Φ(γ)`` one ulp
    across it)."""
    from scipy import special
    v = np.log(coin[:, 1] + HALF_ULP)
    above = np.maximum(-special.ndtri_exp(cal.log_q + v), cal.gamma)
    below = np.minimum(special.ndtri_exp(float(special.log_ndtr(cal.gamma)) + v), np.nextafter(cal.gamma, -np.inf))
    return np.asarray(np.where(coin[:, 0] < cal.p, above, below))


def t_bound(cal: Calibration) -> float:
    """The largest ``|t|`` :func:`sample_t` can return (its levels lie in ``[2⁻⁵⁴, 1)``)."""
    from scipy import special
    top = -float(special.ndtri_exp(cal.log_q + math.log(HALF_ULP)))
    bottom = float(special.ndtri_exp(float(special.log_ndtr(cal.gamma)) + math.log(HALF_ULP)))
    return max(abs(top), abs(bottom), abs(cal.gamma))


def norm_bound(cal: Calibration, k: int) -> float:
    """Largest ``‖σ(g_⊥ + t u)‖`` in ``R^k`` the sampler can produce: ``σ √(⌈k/2⌉·2·53 ln 2 + t_max²)``."""
    return cal.sigma * math.sqrt(-(-k // 2) * BOX_MULLER_RADIUS2 + t_bound(cal) ** 2)


def signed_directions(x: torch.Tensor, radius: float, coin: np.ndarray) -> torch.Tensor:
    """``±x/‖x‖`` (``±e₁`` for ``x = 0``) in float64, ``+`` w.p. ``(1 + ‖x‖/R)/2`` (``coin``: uniforms ``[n]``)."""
    xd = x.double().cpu()
    norms = torch.linalg.vector_norm(xd, dim=1, keepdim=True)
    e1 = torch.zeros(1, xd.shape[1], dtype=torch.float64)
    e1[0, 0] = 1.0
    u = torch.where(norms > 0, xd / norms.clamp_min(1e-300), e1)
    flip = torch.from_numpy(coin)[:, None] >= (1 + norms / radius) / 2
    return torch.where(flip, -u, u)


def privatize(u: torch.Tensor, cal: Calibration, seeds: np.ndarray, stream: str) -> torch.Tensor:
    """``σ(g_⊥ + t u)`` for unit rows ``u`` ``[n, k]`` (float64), from each client's own ``stream`` draws."""
    coin = rng.uniform(seeds, stream, 2)
    t = torch.from_numpy(sample_t(cal, coin))[:, None]
    g = torch.from_numpy(rng.normal(seeds, stream + "-noise", u.shape[1]))
    g = g - (g * u).sum(1, keepdim=True) * u
    return cal.sigma * (g + t * u)


def chunks(n: int, rows: int) -> list[slice]:
    """Row slices of at most ``rows`` (at least one row each)."""
    rows = max(1, rows)
    return [slice(i, min(i + rows, n)) for i in range(0, n, rows)]


def check_norms(v: torch.Tensor, bound: float, name: str) -> None:
    """Refuse messages longer than ``bound`` (float32 rounding allowed for): no honest client sends them."""
    norms = torch.linalg.vector_norm(v.double(), dim=1)
    if bool((norms > bound * (1 + 1e-6)).any()):
        raise WireError(f"{name} message norm {float(norms.max()):.6g} exceeds {bound:.6g}, the largest an honest "
                        f"client's sampler can produce")


@register_encoder("privunitg")
class PrivUnitG(Encoder):
    params: ClassVar[dict[str, Param]] = {}
    unbiased = True
    max_epsilon: ClassVar[float] = MAX_EPSILON
    bits_formula = "32 * d"
    summary = "PrivUnitG: PrivUnit with a Gaussian cap (Asi, Feldman & Talwar 2022), float32 output"
    CHUNK_ELEMENTS: ClassVar[int] = 1 << 21  # rows × d per batch of draws (bounds the temporaries)

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.cal = calibrate(self.epsilon)
        if not self.cal.exact_epsilon() <= self.epsilon * (1 + 1e-9):
            raise ValueError(f"privunitg: the calibrated mechanism's exact epsilon {self.cal.exact_epsilon():.9g} "
                             f"exceeds epsilon={self.epsilon:g}")
        self.bound = self.radius * norm_bound(self.cal, self.dim)

    def layout(self) -> list[Field]:
        return [Field("v", 32, self.dim, kind="f32")]

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        out = torch.empty(x.shape[0], self.dim, dtype=torch.float32)
        for sl in chunks(x.shape[0], self.CHUNK_ELEMENTS // self.dim):
            u = signed_directions(x[sl], self.radius, rng.uniform(seeds[sl], "privunitg-flip", 1)[:, 0])
            out[sl] = (self.radius * privatize(u, self.cal, seeds[sl], "privunitg")).float()
        return Messages({"v": out.to(self.device)})

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        return msgs.fields["v"].to(self.device, torch.float64)

    def check(self, msgs: Messages) -> None:
        check_norms(msgs.fields["v"], self.bound, "privunitg")

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        """``R²(dσ² + γσ) − ‖clip(x)‖²`` (exact; see the module docstring)."""
        xc = self.preprocess(x).double()
        return self.radius**2 * self.cal.mse_scale(self.dim) - (xc**2).sum(1)
