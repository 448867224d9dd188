"""PrivUnit2 (Bhowmick, Duchi, Freudiger, Kapoor, Rogers 2018, "Protection against
reconstruction and its applications in private federated learning", Algorithm 1).

Unit-vector reduction without bias: w.p. ``(1 + ‖x‖/R)/2`` use ``u = x/‖x‖``, else ``-u``
(so ``E = x/R``).  Draw ``V`` uniformly from the cap ``{⟨v, u⟩ ≥ γ}`` w.p. ``p``, else from
its complement; output ``R V / m`` with ``m = E⟨V, u⟩``::

    m = (1−γ²)^α / (2^{d−2} (d−1)) · [ p/(B(α,α) − B(τ;α,α)) − (1−p)/B(τ;α,α) ],
    α = (d−1)/2,  τ = (1+γ)/2

(evaluated in log space with regularized incomplete beta functions).  The output density
w.r.t. the uniform law on the sphere is ``p/P_cap`` on the cap and ``(1−p)/(1−P_cap)`` off
it, so the mechanism's exact ε is ``log(p/(1−p)) + log((1−P_cap)/P_cap)``.

``cap=exact`` (default) picks ``γ`` with ``(1−P_cap)/P_cap = e^{ε₁}`` exactly (the tightest
cap for budget ``ε₁``); ``cap=paper`` uses the paper's sufficient conditions.
Construction refuses ε above :data:`MAX_EPSILON` (30), and any calibration whose exact ε
would exceed the stated one.
The split ``ε = ε₀ + ε₁`` maximizes ``m`` (minimum variance) by a 1-D search.  The cap is
sampled directly: the component along ``u`` from its exact Beta marginal (inverse CDF),
then a uniform direction in the orthogonal complement.  Exact MSE ``R²/m² − ‖x‖²``.
"""

from __future__ import annotations

import math
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
"""Largest per-message ε PrivUnit is calibrated for.  The cap's probability is ``1/(1+e^{ε₁})`` and the
in-cap coin's ``1/(1+e^{−ε₀})``; past ε ≈ 30 float64 resolves them so coarsely (and past ≈ 37 not at
all) that the calibrated mechanism's exact ε drifts from the stated one, so construction refuses."""


def cap_probability(gamma: float, d: int) -> float:
    """``P(⟨V, u⟩ ≥ γ)`` for ``V`` uniform on the unit sphere of ``R^d``."""
    from scipy import special
    a = (d - 1) / 2
    return float(special.betainc(a, a, (1 - gamma) / 2))


def gamma_exact(eps1: float, d: int) -> float:
    """The cap with ``(1 − P_cap)/P_cap = e^{ε₁}``."""
    from scipy import special
    a = (d - 1) / 2
    tau = float(special.betaincinv(a, a, 1.0 / (1.0 + math.exp(-eps1))))
    return 2 * tau - 1


def gamma_paper(eps1: float, d: int) -> float:
    """Largest ``γ`` allowed by the sufficient conditions of Bhowmick et al."""
    from scipy.optimize import brentq
    dp = d - 1
    g1 = math.tanh(eps1 / 2) * math.sqrt(math.pi / (2 * dp))
    best = g1 if g1 <= math.sqrt(2 / d) else 0.0

    def cost(g: float) -> float:
        return 0.5 * math.log(d) + math.log(6) - dp / 2 * math.log1p(-g * g) + math.log(g) - eps1

    lo = math.sqrt(2 / d)
    if lo < 1 and cost(lo) <= 0:
        hi = 1 - 1e-15
        best = max(best, lo if cost(hi) <= 0 else brentq(cost, lo, hi, xtol=1e-15))
    return best


def log_m(gamma: float, p: float, d: int) -> float:
    """``log m`` with ``m = E⟨V, u⟩`` (see module docstring); ``-inf`` if ``m ≤ 0``."""
    from scipy import special
    a = (d - 1) / 2
    tau = (1 + gamma) / 2
    i_tau = float(special.betainc(a, a, tau))
    upper = 1.0 - i_tau if i_tau < 0.5 else float(special.betainc(a, a, 1 - tau))
    if not (upper > 0 and i_tau > 0):  # a cap (or complement) of zero measure in float64: no valid mechanism
        return -math.inf
    bracket = p / upper - (1 - p) / i_tau
    if not bracket > 0:
        return -math.inf
    return a * math.log1p(-gamma * gamma) - math.log(d - 1) - (d - 2) * math.log(2) - special.betaln(a, a) + math.log(bracket)


def calibrate(eps: float, d: int, cap: str = "exact", grid: int = 199) -> tuple[float, float, float, float]:
    """Choose ``(ε₀, γ, p, m)`` maximizing ``m`` over the split ``ε = ε₀ + ε₁``."""
    best = (-math.inf, 0.0, 0.0, 0.0)
    rule = gamma_exact if cap == "exact" else gamma_paper
    for frac in np.linspace(0.0, 1.0, grid + 2)[1:-1]:
        eps0 = float(frac * eps)
        gamma = rule(eps - eps0, d)
        p = 1.0 / (1.0 + math.exp(-eps0))
        if p >= 1.0:  # the in-cap coin would be certain: not a private mechanism in float64
            continue
        lm = log_m(gamma, p, d)
        if lm > best[0]:
            best = (lm, eps0, gamma, p)
    lm, eps0, gamma, p = best
    if not math.isfinite(lm):
        raise ValueError(f"PrivUnit: no valid cap for epsilon={eps}, d={d}")
    return eps0, gamma, p, math.exp(lm)


@register_encoder("privunit")
class PrivUnit(Encoder):
    params: ClassVar[dict[str, Param]] = {
        "cap": Param(str, "exact", "cap calibration: exact ratio or the paper's sufficient bound", ("exact", "paper")),
    }
    unbiased = True
    bits_formula = "32 * d"
    summary = "PrivUnit2: spherical cap sampling, float32 output"

    def __init__(self, *args: Any, **kw: Any):
        from scipy import special
        super().__init__(*args, **kw)
        if self.dim < 2:
            raise ValueError(f"PrivUnit needs dim >= 2, got {self.dim}")
        if self.epsilon > MAX_EPSILON:
            raise ValueError(f"privunit supports epsilon <= {MAX_EPSILON:g}, got epsilon={self.epsilon:g} (beyond it the "
                             f"cap and coin probabilities are too close to 0 and 1 for float64 calibration)")
        self.eps0, self.gamma, self.p, self.m = calibrate(self.epsilon, self.dim, self.cfg["cap"])
        self.alpha = (self.dim - 1) / 2
        self.i_tau = float(special.betainc(self.alpha, self.alpha, (1 + self.gamma) / 2))
        if not self.exact_epsilon() <= self.epsilon * (1 + 1e-6):
            raise ValueError(f"privunit: the calibrated mechanism's exact epsilon {self.exact_epsilon():.9g} exceeds "
                             f"epsilon={self.epsilon:g} (d={self.dim})")

    def exact_epsilon(self) -> float:
        """The mechanism's exact ε: ``log(p/(1−p)) + log((1−P_cap)/P_cap)``."""
        pc = cap_probability(self.gamma, self.dim)
        return math.log(self.p / (1 - self.p)) + math.log((1 - pc) / pc)

    def layout(self) -> list[Field]:
        return [Field("v", 32, self.dim, kind="f32")]

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        from scipy import special
        n, d = x.shape
        xd = x.double().cpu()
        norms = torch.linalg.vector_norm(xd, dim=1, keepdim=True)
        e1 = torch.zeros(1, d, dtype=torch.float64)
        e1[0, 0] = 1.0
        u = torch.where(norms > 0, xd / norms.clamp_min(1e-300), e1)
        coin = torch.from_numpy(rng.uniform(seeds, "privunit", 3))
        flip = coin[:, 0:1] >= (1 + norms / self.radius) / 2
        u = torch.where(flip, -u, u)
        in_cap = coin[:, 1].numpy() < self.p
        q = coin[:, 2].numpy()
        level = np.where(in_cap, self.i_tau + q * (1 - self.i_tau), q * self.i_tau)
        t = torch.from_numpy(2 * special.betaincinv(self.alpha, self.alpha, level) - 1)[:, None]
        g = torch.from_numpy(rng.normal(seeds, "privunit-direction", d))
        g = g - (g * u).sum(1, keepdim=True) * u
        g = g / torch.linalg.vector_norm(g, dim=1, keepdim=True)
        v = t * u + torch.sqrt((1 - t * t).clamp_min(0)) * g
        return Messages({"v": (self.radius / self.m * v).to(self.device, torch.float32)})

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        return msgs.fields["v"].to(self.device, torch.float64)

    def check(self, msgs: Messages) -> None:
        norms = torch.linalg.vector_norm(msgs.fields["v"].double(), dim=1)
        want = self.radius / self.m
        if bool(((norms - want).abs() > 1e-4 * want).any()):
            raise WireError(f"privunit message norm out of range (every output has norm R/m = {want:.6g})")

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        xc = self.preprocess(x).double()
        return (self.radius / self.m) ** 2 - (xc**2).sum(1)
