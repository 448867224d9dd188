"""MMRC — PrivUnit2 simulated by modified minimal random coding (Shah, Chen, Ballé, Kairouz, Theis,
"Optimal compression of locally differentially private mechanisms", AISTATS 2022, the pure-LDP modified MRC),
as Isik, Chen, Özgür, Weissman & No (NeurIPS 2023) run it as the baseline of RRSC.

**Mechanism.**  ``N = 2^bits`` candidates ``z_1..z_N`` i.i.d. uniform on ``S^{d−1}`` are named by a seed.
The unit direction is ``u = x/‖x‖``, flipped to ``−u`` w.p. ``(1 − ‖x‖/R)/2`` (as in :mod:`.privunit`).  The
target law is PrivUnit2's density at ``(γ, p)`` (Bhowmick et al. 2018): ``π_k ∝ c₁ = p/P_cap`` if
``⟨u, z_k⟩ ≥ γ`` else ``c₂ = (1−p)/(1−P_cap)``.  The authors' ``modify_pi`` (η = ε/2, factor ``c₁e^{−ε/2}``) moves
``π`` into the band ``[L, U] = [c₁e^{−ε}/N, c₁/N]``; then every index probability lies in the band for *every*
candidate set, so the index is ε-LDP (``U/L = e^ε``; :attr:`~.rrsc.IndexEncoder.output_law` gives the exact law).
For ``π`` with two values their loop has a closed form, which :func:`band_law` evaluates vectorised: with ``n₁``
candidates in the cap, ``a = c₁/S``, ``b = c₂/S``, ``S = n₁c₁ + n₂c₂``, the mass above ``U`` is ``n₁(a−U)⁺`` and the
mass below ``L`` is ``n₂(L−b)⁺``; if both are 0 the law is unchanged, if the first is larger the cap gets ``U``
and the rest share ``1 − n₁U``, else the rest get ``L`` and the cap shares ``1 − n₂L``.  The server decodes
``x̂ = R z_K / m̃``.

**Calibration.** ``cap=paper`` (default, the authors'): budget ``b`` on their 99-point grid maximising PrivUnit2's
``m``, ``γ`` by their iterative rule on the paper's sufficient conditions for ``ε₁ = bε``,
``p = 1/(1+e^{−(1−b)ε})``. ``cap=exact``: our PrivUnit2 calibration (exact cap, :func:`.privunit.calibrate`). The band,
not the cap, makes the index private, so either is ε-LDP; the paper's looser cap is the default because it decodes
better with few candidates (``m`` = 0.0074 vs 0.0043 at d = 500, ε = 6, 2 bits; 0.0617 vs 0.0599 at 6 bits).
``debias=paper`` (default): the authors' ``m̃ = m(γ, p̃)``, ``p̃`` their binomial approximation of the in-cap mass
after the band. ``debias=exact``: ``p̃ = E[mass in the cap]`` over ``n₁ ~ Bin(N, P_cap)`` with the closed form
above, so ``E[x̂] = x`` exactly for i.i.d. uniform candidates. In general ``E[x̂] = (m/m̃) x`` with
``m = m(γ, E[mass in the cap])`` (:attr:`MMRC.bias_factor`), and ``E‖x̂ − x‖² = R²/m̃² − (2m/m̃ − 1)‖x‖²`` (:meth:`MMRC.mse`,
exact for i.i.d. candidates). The authors' ``m̃`` is biased upward: ``m/m̃ − 1`` is +1.8%, +4.5% and +3.3% at
d = 500, ε = 6 and 2, 4, 6 bits, +1.2% at ε = 2 (2 bits) and +2.7% at ε = 4 (4 bits); +2.2% at d = 16, ε = 2, 3 bits,
where the tests measure it.

**Versus privunit-mrc.**  :mod:`.privunit_mrc` is a band-constrained MRC too, but it ranks the candidates by
score (the law maximising ``E⟨z_K, u⟩`` within the band: PrivUnit's cap on the empirical candidate law), uses
structured Hadamard candidates on ``S^{P−1}`` and an exact ``m``; MMRC keeps PrivUnit2's fixed threshold ``γ``,
i.i.d. Gaussian-normalised candidates (``O(N d)`` per client) and the authors' debiasing.

**Candidate source.** As for :mod:`.rrsc`: ``coin=message`` (default) from a ``seed_bits``-bit seed sent with
``K`` (the candidates are then one of ``2^seed_bits`` sets, and the bias and MSE above hold up to that finite
family: visibly so below about 12 bits), ``coin=public`` from public per-client coins (the authors' shared
randomness).  ``bits = 0`` (default) sends ``min(⌈ε⌉, 12)`` index bits (the authors run ``bits = ε``). The authors'
``getm`` uses Stirling's formula beyond d = 1000; ours is exact.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from .base import Param, register_encoder
from .privunit import MAX_EPSILON, calibrate, log_m
from .rrsc import IndexEncoder
from .seeded import seed_params

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

MAX_BITS = 12
"""Largest ``bits`` (``N = 4096`` Gaussian candidates of dimension ``d`` per client)."""
CANDIDATE_COST = 2**24
"""Largest ``N·d`` (Gaussian entries drawn per client, about 0.3 s) ``mmrc`` accepts."""


def find_best_gamma(d: int, eps1: float) -> float:
    """The authors' ``γ`` for the cap budget ``ε₁``: ``γ_b = min(e^{ε₁}/(6√d), 1)`` divided by 1.01 until the
    paper's sufficient condition holds, kept if above ``√(2/d)`` (then ``max(γ_b, γ_a)``), else
    ``γ_a = tanh(ε₁/2) √(π/(2d−2))``."""
    gamma_a = math.tanh(eps1 / 2) * math.sqrt(math.pi / (2 * d - 2))
    g = min(math.exp(eps1) / (6 * math.sqrt(d)), 1.0)
    while g >= 1.0 or eps1 < 0.5 * math.log(d * 36) - (d - 1) / 2 * math.log1p(-g * g) + math.log(g):
        g /= 1.01
    return max(g, gamma_a) if g > math.sqrt(2 / d) else gamma_a


def paper_parameters(epsilon: float, d: int) -> tuple[float, float]:
    """``(γ, p)`` at the authors' budget: the split on ``0.01, 0.02, …, 0.99`` maximising PrivUnit2's ``m``."""
    best = (-math.inf, 0.0, 0.0)
    for budget in np.linspace(0.01, 0.99, 99):
        gamma = find_best_gamma(d, float(budget) * epsilon)
        p = 1.0 / (1.0 + math.exp(-(1 - float(budget)) * epsilon))
        lm = log_m(gamma, p, d)
        if lm > best[0]:
            best = (lm, gamma, p)
    if not math.isfinite(best[0]):
        raise ValueError(f"mmrc: no valid PrivUnit2 cap for epsilon={epsilon}, d={d}")
    return best[1], best[2]


def densities(gamma: float, p: float, d: int) -> tuple[float, float, float]:
    """``(c₁, c₂, P_cap)``: PrivUnit2's density on and off the cap w.r.t. the uniform law, and the cap's measure."""
    from scipy import special
    two_cap = float(special.betainc((d - 1) / 2, 0.5, 1 - gamma * gamma))
    return 2 * p / two_cap, 2 * (1 - p) / (2 - two_cap), two_cap / 2


def band_values(n1: torch.Tensor, n_cand: int, c1: float, c2: float, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-candidate probability in and out of the cap after ``modify_pi``, for ``n1`` candidates in the cap."""
    n1 = n1.double()
    n2 = n_cand - n1
    s = n1 * c1 + n2 * c2
    a, b = c1 / s, c2 / s
    hi, lo = c1 / n_cand, c1 * math.exp(-epsilon) / n_cand
    above, below = n1 * (a - hi).clamp_min(0), n2 * (lo - b).clamp_min(0)
    keep = (above == 0) & (below == 0)
    cut_top = above > below
    va = torch.where(keep, a, torch.where(cut_top, torch.full_like(a, hi), (1 - n2 * lo) / n1.clamp_min(1)))
    vb = torch.where(keep, b, torch.where(cut_top, (1 - n1 * hi) / n2.clamp_min(1), torch.full_like(b, lo)))
    return va, vb


def band_law(in_cap: torch.Tensor, c1: float, c2: float, epsilon: float) -> torch.Tensor:
    """The law ``modify_pi`` returns for the two-valued ``π`` of the cap indicators ``in_cap`` ``[..., N]``."""
    va, vb = band_values(in_cap.sum(-1, keepdim=True), in_cap.shape[-1], c1, c2, epsilon)
    return torch.where(in_cap, va, vb)


def paper_p_tilde(n_cand: int, c1: float, c2: float, p: float, epsilon: float) -> float:
    """The authors' ``get_unbiased_p_tilde``: their approximation of the expected in-cap mass after the band."""
    from scipy import stats
    beta = np.arange(n_cand + 1) / n_cand
    cap = p / c1
    pi_in = c1 / (beta * c1 + (1 - beta) * c2) / n_cand
    t1 = pi_in * (1 + beta * math.expm1(epsilon)) / (1 + cap * math.expm1(epsilon))
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = t1 * (beta + cap * math.expm1(epsilon)) / (beta * math.exp(epsilon))
    t2[0] = 0.0
    tilde = np.where(beta <= cap, t1, t2)
    pmf = stats.binom.pmf(np.arange(n_cand + 1), n_cand, cap)
    return float(np.sum(pmf * np.arange(n_cand + 1) * tilde))


def exact_p_tilde(n_cand: int, c1: float, c2: float, epsilon: float, cap: float) -> float:
    """``E[mass in the cap]`` of :func:`band_law` over ``n₁ ~ Bin(N, P_cap)`` (i.i.d. uniform candidates)."""
    from scipy import stats
    n1 = torch.arange(n_cand + 1)
    va, _ = band_values(n1, n_cand, c1, c2, epsilon)
    pmf = torch.from_numpy(stats.binom.pmf(np.arange(n_cand + 1), n_cand, cap))
    return float((pmf * n1.double() * va).sum())


@lru_cache(maxsize=256)
def calibrate_mmrc(d: int, n_cand: int, epsilon: float, cap: str) -> dict[str, float]:
    """``γ, p, c₁, c₂, P_cap`` and the two ``m``'s: ``m_paper = m(γ, p̃)`` and ``m_exact = m(γ, E[in-cap mass])``."""
    gamma, p = paper_parameters(epsilon, d) if cap == "paper" else calibrate(epsilon, d, "exact")[1:3]
    c1, c2, p_cap = densities(gamma, p, d)
    m_paper = math.exp(log_m(gamma, paper_p_tilde(n_cand, c1, c2, p, epsilon), d))
    m_exact = math.exp(log_m(gamma, exact_p_tilde(n_cand, c1, c2, epsilon, p_cap), d))
    if not (m_paper > 0 and m_exact > 0):
        raise ValueError(f"mmrc: no useful calibration for epsilon={epsilon}, d={d}, N={n_cand}")
    return {"gamma": gamma, "p": p, "c1": c1, "c2": c2, "p_cap": p_cap, "m_paper": m_paper, "m_exact": m_exact}


@register_encoder("mmrc")
class MMRC(IndexEncoder):
    width = "bits"
    params: ClassVar[dict[str, Param]] = {
        "bits": Param(int, 0, "index bits: N = 2^bits public candidates per message (0: min(ceil(ε), 12))", low=0,
                      high=MAX_BITS),
        "cap": Param(str, "paper", "PrivUnit2 cap: the authors' sufficient-condition gamma and budget grid, or our "
                     "exact cap", ("paper", "exact")),
        "debias": Param(str, "paper", "decoder gain: the authors' m-tilde, or the exact in-cap mass (unbiased)",
                        ("paper", "exact")),
        **seed_params("candidates"),
    }
    unbiased = False
    bits_formula = "bits + seed_bits if coin == 'message' else bits"
    summary = "PrivUnit2 by modified minimal random coding (Shah et al. 2022; the RRSC paper's MMRC)"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        if self.dim < 2:
            raise ValueError(f"mmrc needs dim >= 2, got {self.dim}")
        if self.epsilon > MAX_EPSILON:
            raise ValueError(f"mmrc supports epsilon <= {MAX_EPSILON:g}, got epsilon={self.epsilon:g}")
        self.bits = self.cfg["bits"] or self.auto_bits()
        self.size = self.N = 1 << self.bits
        if self.N * self.dim > CANDIDATE_COST:
            raise ValueError(f"mmrc: N*d = {self.N * self.dim} candidate entries per client (limit {CANDIDATE_COST}); "
                             f"lower bits")
        cal = calibrate_mmrc(self.dim, self.N, self.epsilon, self.cfg["cap"])
        self.gamma, self.p, self.c1, self.c2 = cal["gamma"], cal["p"], cal["c1"], cal["c2"]
        self.m = cal["m_exact"]
        self.m_tilde = cal["m_paper"] if self.cfg["debias"] == "paper" else cal["m_exact"]
        self.gain = 1.0 / self.m_tilde
        self.bias_factor = self.m / self.m_tilde  # E[x̂] = bias_factor · x (1 with debias=exact)

    def auto_bits(self) -> int:
        """``bits = 0``: ``min(⌈ε⌉, 12)``, lowered until ``N·d`` is within :data:`CANDIDATE_COST`."""
        bits = min(max(1, math.ceil(self.epsilon)), MAX_BITS)
        while bits > 1 and self.dim << bits > CANDIDATE_COST:
            bits -= 1
        return bits

    def bits_quantities(self) -> dict[str, Any]:
        return {**super().bits_quantities(), "bits": self.bits}

    def _candidates(self, pub: np.ndarray, k: np.ndarray) -> torch.Tensor:
        """Unit candidates ``[len(pub), k.shape[1], d]`` (``k`` 2-D, broadcast against ``pub``): candidate ``k`` of
        seed ``pub`` is a normalised Gaussian drawn from its own seed, so the server rebuilds only ``z_K``."""
        seeds = rng.derive_seeds(pub[:, None], k)
        z = torch.from_numpy(rng.normal(seeds, "mmrc-candidate", self.dim)).reshape(len(pub), -1, self.dim)
        return z / torch.linalg.vector_norm(z, dim=-1, keepdim=True)

    def _matrix(self, pub: np.ndarray) -> torch.Tensor:
        return self._candidates(pub, np.arange(self.N, dtype=np.uint64)[None, :]).transpose(1, 2)

    def _law(self, scores: torch.Tensor) -> torch.Tensor:
        return band_law(scores >= self.gamma, self.c1, self.c2, self.epsilon)

    def _directions_of(self, k: torch.Tensor, pub: np.ndarray) -> torch.Tensor:
        return self._candidates(pub, k.numpy().astype(np.uint64)[:, None])[:, 0]

    def mse(self, x: torch.Tensor) -> torch.Tensor | None:
        """``R²/m̃² − (2m/m̃ − 1)‖clip(x)‖²`` (exact for i.i.d. uniform candidates, the bias included)."""
        xc = self.preprocess(x).double()
        return (self.radius / self.m_tilde) ** 2 - (2 * self.bias_factor - 1) * (xc**2).sum(1)
