"""PrivUnit compressed by minimal random coding (Shah, Chen, Ballé, Kairouz, Theis, "Optimal
compression of locally differentially private mechanisms", AISTATS 2022; PrivUnit2 of Bhowmick,
Duchi, Freudiger, Kapoor, Rogers, "Protection against reconstruction and its applications in private
federated learning", arXiv:1812.00984, 2018).

**Mechanism.**  ``P = 2^⌈log2 d⌉``; the unit direction ``u = x/‖x‖`` is flipped to ``v = −u`` w.p.
``(1 − ‖x‖/R)/2`` (a private coin, as in :mod:`.privunit`) and padded with zeros to ``v ∈ S^{P−1}``.
The client draws a *candidate seed* ``S`` (``seed_bits`` uniform bits, independent of ``x``), which
names ``N = 2^bits`` public unit candidates ``U_1..U_N ∈ S^{P−1}``; it sends ``(S, K)``, and the
server decodes ``x̂ = R · U_K[:d] / m``.  With ``coin=public`` the candidate seed comes from the
caller's public per-client ``coins`` instead and only ``K`` is sent.

**Selection rule (a band-constrained MRC).**  Plain MRC samples ``K ∝ q(U_k|v)/p(U_k)``; for an
``ε_in``-LDP ``q`` its exact guarantee over every candidate set is
``ε_in + log((1+(N−1)e^{ε_in})/(e^{ε_in}+N−1))`` (→ ``2ε_in``; Shah et al. §3), so the inner
PrivUnit would run at about ``ε/2``.  Shah et al.'s modified MRC instead keeps every index
probability inside a band ``[β/N, α/N]``, ``α = e^ε β``: then for *every* realisation of the
candidates and all inputs ``P(K=k|x)/P(K=k|x') ≤ α/β = e^ε``.  Within the band, the law maximising
``E⟨U_K, v⟩`` is PrivUnit's cap on the empirical candidate law: rank the scores ``t_k = ⟨U_k, v⟩``
(descending), give the top ``r = ⌊s⌋`` ranks ``α/N``, rank ``r`` the remainder
``β/N + (s−r)(α−β)/N`` and the rest ``β/N``, where ``s = N(1−β)/(α−β)`` (so the law sums to 1).
Sampling: w.p. ``β`` a uniform index, else the candidate of rank ``⌊ρ⌋``, ``ρ ~ U[0, s)``.  The
bound is attained (``ε`` exact) whenever ``s ≥ 1`` and one candidate is ranked first for ``x`` and
last for ``x'``; the sign-flip mixture and the data-independent seed ``S`` keep it.  As
``N → ∞`` this is PrivUnit2 at the full ``ε`` (cap ``P_cap = s/N``, ``p = α s/N``), not at ``ε/2``.

**Calibration.**  For i.i.d. uniform candidates on ``S^{P−1}``, rotation invariance gives
``E[U_K | v] = m v`` with ``m = (α−β) ∫₀¹ t(q) h(q) dq``, ``t(q)`` the upper ``q``-quantile of
``⟨U, v⟩`` (``(1+t)/2 ~ Beta((P−1)/2, (P−1)/2)``) and ``h(q) = P(B ≤ r−1) + (s−r) P(B = r)``,
``B ~ Bin(N−1, q)`` (the chance that a candidate at quantile ``q`` is among the top ranks).
``β ∈ (e^{−ε}, 1)`` maximises ``m`` (1-D search; PrivUnit's own optimum on ``S^{P−1}`` is the
``N → ∞`` limit).  In that model ``x̂`` is unbiased with
``E‖x̂ − x‖² = R²/m² (T₂ + (1 − T₂)(d−1)/(P−1)) − ‖x‖²``, ``T₂ = E t_K²`` (:meth:`ideal_mse`).

**Candidates** (a structured choice of our own, for speed).  Block ``b`` of ``P`` candidates is the
rows of the orthogonal ``H D_{b,1} H D_{b,2} H D_{b,3} / P^{3/2}`` (``H`` Sylvester–Hadamard, ``D`` random signs from the
candidate seed), so all scores cost ``O(P log P)`` per block and the server rebuilds one row.
Such candidates are only approximately i.i.d. uniform: the privacy bound holds for them exactly,
but unbiasedness and the MSE only approximately, so ``unbiased = False`` and :meth:`mse` is
``None``.  Measured (ε = 3, ‖x‖ = R, defaults): no bias visible at d = 24 (ε = 2, bits = 8: the tests), 1,000 (x = e₁, Gaussian,
half-support; 5·10⁴–10⁵ messages: ``n‖x̄ − x‖²/MSE`` within 2.1σ of 1) and 25,450
(10⁴ messages, 0.999 ± 0.009); the MSE equals :meth:`ideal_mse` to 4 digits.

**Defaults.**  ``bits = 12`` (``N = 4096``), ``seed_bits = 20``: 32 bits per message.  At ε = 3 the
i.i.d. model's MSE is within 0.1% of PrivUnit2's at d = 1,000 and 25,450 (0.3% at ``bits = 10``,
1% at ``bits = 8``); plain MRC at the same exact ε needs ``ε_in ≈ 1.50`` and loses ≥ 3.8x.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from .base import Encoder, Field, Messages, Param, register_encoder
from .maths.fwht import fwht_
from .privunit import MAX_EPSILON, calibrate, cap_probability
from .seeded import draw_seed, public_seeds, seed_fields, seed_params

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

MAX_BITS = 24
"""Largest ``bits`` (``2^24`` candidates per message already costs seconds per client)."""


def padded_dim(d: int) -> int:
    """``P = 2^⌈log2 d⌉`` (at least 2): the sphere ``S^{P−1}`` the candidates live on."""
    return max(2, 1 << math.ceil(math.log2(d)))


def band(n_cand: int, epsilon: float, beta: float) -> tuple[float, float, int, float]:
    """``(α, s, r, frac)`` of the band rule: ``α = e^ε β``, ``s = N(1−β)/(α−β)``, ``r = ⌊s⌋``."""
    alpha = beta * math.exp(epsilon)
    s = n_cand * (1 - beta) / (alpha - beta)
    r = min(int(math.floor(s)), n_cand - 1)
    return alpha, s, r, s - r


def index_law(scores: torch.Tensor, epsilon: float, beta: float) -> torch.Tensor:
    """Exact law ``P(K = k)`` of the band rule for rows of scores ``[n, N]`` (see module docstring).

    Every entry lies in ``[β/N, α/N]`` whatever the scores (ties ranked as :func:`top_ranks` does).
    """
    n_cand = scores.shape[1]
    alpha, _, r, frac = band(n_cand, epsilon, beta)
    excess = torch.zeros(scores.shape, dtype=torch.float64)
    top = top_ranks(scores, r)
    excess.scatter_(1, top[:, :r], 1.0)
    excess.scatter_(1, top[:, r:], frac)
    return (beta + (alpha - beta) * excess) / n_cand


def top_ranks(scores: torch.Tensor, r: int) -> torch.Tensor:
    """Indices of the ``r + 1`` largest scores per row, best first (``torch.topk``'s order on ties:
    whichever it is, every index probability stays in the band)."""
    return torch.topk(scores, r + 1, dim=1, sorted=True).indices


def _quantile_moment(p_dim: int, n_cand: int, epsilon: float, beta: float, power: int) -> float:
    """``(α−β) ∫₀¹ t(q)^power h(q) dq`` (+ ``β E t^power``): ``E t_K^power`` for i.i.d. uniform candidates."""
    from scipy import integrate, special
    alpha, s, r, frac = band(n_cand, epsilon, beta)
    a = (p_dim - 1) / 2

    def integrand(q: float) -> float:
        below = float(special.bdtr(r - 1, n_cand - 1, q)) if r >= 1 else 0.0
        h = below + frac * (float(special.bdtr(r, n_cand - 1, q)) - below)
        return float((1 - 2 * special.betaincinv(a, a, q)) ** power) * h

    f = s / n_cand
    w = math.sqrt(f / n_cand) + 1 / n_cand
    pts = sorted({max(1e-15, f - 12 * w), f, min(1 - 1e-15, f + 12 * w)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        val = integrate.quad(integrand, 0, 1, points=pts, limit=500, epsabs=1e-15, epsrel=1e-11)[0]
    return (alpha - beta) * val + (beta / p_dim if power == 2 else 0.0)


@lru_cache(maxsize=256)
def calibrate_band(p_dim: int, n_cand: int, epsilon: float) -> tuple[float, float, float]:
    """``(β, m, T₂)`` maximising ``m = E⟨U_K, v⟩`` over ``β ∈ (e^{−ε}, 1)`` (i.i.d. uniform candidates).

    Starts from PrivUnit's optimum on ``S^{P−1}`` (``β = (1−p)/(1−P_cap)``, the ``N → ∞`` answer)
    and keeps whichever of it and a bounded 1-D search in ``log β`` is better.
    """
    from scipy.optimize import minimize_scalar
    _, gamma, p, _ = calibrate(epsilon, p_dim)
    guess = (1 - p) / (1 - cap_probability(gamma, p_dim))
    lo, hi = -epsilon * (1 - 1e-9), -1e-9 * min(1.0, epsilon)
    res = minimize_scalar(lambda lb: -_quantile_moment(p_dim, n_cand, epsilon, math.exp(lb), 1),
                          bounds=(lo, hi), method="bounded", options={"xatol": 1e-5})
    options = [b for b in (guess, math.exp(float(res.x))) if math.exp(-epsilon) < b < 1]
    beta = max(options, key=lambda b: _quantile_moment(p_dim, n_cand, epsilon, b, 1))
    m = _quantile_moment(p_dim, n_cand, epsilon, beta, 1)
    if not m > 0:
        raise ValueError(f"privunit-mrc: no useful band for epsilon={epsilon}, N={n_cand}, P={p_dim}")
    return beta, m, _quantile_moment(p_dim, n_cand, epsilon, beta, 2)


class HadamardCandidates:
    """``N`` unit candidates in ``R^P``: rows of ``H D_{b,1} H D_{b,2} H D_{b,3} / P^{3/2}``, block ``b``.

    The signs ``D`` of every block come from one public 64-bit candidate seed per message.
    """

    def __init__(self, p_dim: int, n_cand: int):
        self.P, self.N = p_dim, n_cand
        self.blocks = -(-n_cand // p_dim)

    def signs(self, cseeds: np.ndarray) -> torch.Tensor:
        """``[n, blocks, 3, P]`` booleans (``True``: sign −1), a pure function of each candidate seed."""
        nbits = 3 * self.blocks * self.P
        words = rng.raw_bits(cseeds, "privunit-mrc-signs", -(-nbits // 64))
        bits = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), axis=1)[:, :nbits]
        return torch.from_numpy(bits.view(np.bool_)).reshape(-1, self.blocks, 3, self.P)

    def scores(self, v: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
        """``⟨U_k, v⟩`` for all ``k`` → ``[n, N]`` float32: ``H D₁ H D₂ H D₃ v / P^{3/2}``.

        ``v`` is ``[n, P]`` float32; a sign flip is an XOR of the float's sign bit (exact).
        """
        n = v.shape[0]
        y = v.repeat(1, self.blocks).reshape(n * self.blocks, self.P)  # a copy: the transforms below are in place
        flips = signs.permute(2, 0, 1, 3).reshape(3, n * self.blocks, self.P).to(torch.int32).bitwise_left_shift_(31)
        bits = y.view(torch.int32)
        for layer in (2, 1, 0):
            bits.bitwise_xor_(flips[layer])
            fwht_(y)
        return y.reshape(n, self.blocks * self.P)[:, : self.N]

    def rows(self, k: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
        """Candidates ``U_k`` ``[n, P]`` float64: ``D₃ H D₂ H D₁ H e_row / P^{3/2}`` of block ``k // P``."""
        n = k.shape[0]
        flips = signs[torch.arange(n), k // self.P].permute(1, 0, 2).to(torch.int64).bitwise_left_shift_(63)
        y = torch.zeros(n, self.P, dtype=torch.float64)
        y[torch.arange(n), k % self.P] = self.P**-1.5
        bits = y.view(torch.int64)
        for layer in (0, 1, 2):
            fwht_(y)
            bits.bitwise_xor_(flips[layer])
        return y


@register_encoder("privunit-mrc")
class PrivUnitMRC(Encoder):
    width = "bits"
    params: ClassVar[dict[str, Param]] = {
        "bits": Param(int, 12, "index bits: N = 2^bits public candidates per message", low=1,
                     high=MAX_BITS),
        **seed_params("candidates"),
    }
    unbiased = False
    bits_formula = "bits + seed_bits if coin == 'message' else bits"
    summary = "PrivUnit2 compressed by band-constrained minimal random coding (Hadamard candidates)"
    CHUNK: ClassVar[int] = 64  # clients per transform batch (bounds the [n, blocks, 3, P] sign tensor)

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        if self.epsilon > MAX_EPSILON:
            raise ValueError(f"privunit-mrc supports epsilon <= {MAX_EPSILON:g}, got epsilon={self.epsilon:g}")
        bits, sbits = self.cfg["bits"], self.cfg["seed_bits"]
        if not 1 <= bits <= MAX_BITS:
            raise ValueError(f"privunit-mrc bits must be in [1, {MAX_BITS}], got {bits}")
        if not 0 <= sbits <= 32:
            raise ValueError(f"privunit-mrc seed_bits must be in [0, 32], got {sbits}")
        self.P, self.N = padded_dim(self.dim), 1 << bits
        self.beta, self.m, self.t2 = calibrate_band(self.P, self.N, self.epsilon)
        self.alpha, self.s, self.r, self.frac = band(self.N, self.epsilon, self.beta)
        self.cands = HadamardCandidates(self.P, self.N)

    def exact_epsilon(self) -> float:
        """``log(α/β)``: the exact ε of the index law over every candidate set (attained when ``s ≥ 1``)."""
        return math.log(self.alpha / self.beta)

    def layout(self) -> list[Field]:
        return [Field("k", self.cfg["bits"]), *seed_fields(self.cfg)]

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        n = x.shape[0]
        s = draw_seed(self, seeds)
        cseeds = public_seeds(self, s, coins, n)
        coin = rng.uniform(seeds, "privunit-mrc", 3)
        v = self._directions(x.cpu(), coin)
        k = torch.cat([self._select(v[i : i + self.CHUNK], cseeds[i : i + self.CHUNK], coin[i : i + self.CHUNK])
                       for i in range(0, n, self.CHUNK)])
        fields = {"k": k[:, None].to(self.device)}
        if len(self.layout()) == 2:
            fields["s"] = torch.from_numpy(s)[:, None].to(self.device)
        return Messages(fields)

    def _directions(self, x: torch.Tensor, coin: np.ndarray) -> torch.Tensor:
        """``v = ±x/‖x‖ / P^{3/2}`` (``+`` w.p. ``(1 + ‖x‖/R)/2``; ``±e₁`` for ``x = 0``), zero-padded to ``[n, P]``
        float32 (the Hadamard normalisation folded in)."""
        norms = torch.linalg.vector_norm(x, dim=1, keepdim=True, dtype=torch.float64)
        flip = torch.from_numpy(coin[:, 0:1]) >= (1 + norms / self.radius) / 2
        sign = torch.where(flip, -1.0, 1.0).double() / self.P**1.5
        nonzero = norms > 0
        v = torch.zeros(x.shape[0], self.P, dtype=torch.float32)
        v[:, : self.dim] = x * torch.where(nonzero, sign / torch.where(nonzero, norms, 1.0), 0.0).to(x.dtype)
        v[:, 0] += torch.where(nonzero[:, 0], 0.0, sign[:, 0]).float()
        return v

    def _select(self, v: torch.Tensor, cseeds: np.ndarray, coin: np.ndarray) -> torch.Tensor:
        """Sample ``K`` from the band law: w.p. ``β`` uniform, else the rank ``⌊ρ⌋``, ``ρ ~ U[0, s)``."""
        scores = self.cands.scores(v, self.cands.signs(cseeds))
        c = torch.from_numpy(coin[:, 2])
        uniform_k = torch.clamp((c * self.N).long(), max=self.N - 1)
        rank = torch.clamp((c * self.s).long(), max=self.r)
        top_k = top_ranks(scores, self.r).gather(1, rank[:, None])[:, 0]
        return torch.where(torch.from_numpy(coin[:, 1]) < self.beta, uniform_k, top_k)

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        k = msgs.fields["k"][:, 0].cpu().long()
        s = msgs.fields["s"][:, 0].cpu().numpy() if "s" in msgs.fields else np.zeros(msgs.n, np.int64)
        cseeds = public_seeds(self, s, coins, msgs.n)
        rows = [self.cands.rows(k[i : i + self.CHUNK], self.cands.signs(cseeds[i : i + self.CHUNK]))
                for i in range(0, msgs.n, self.CHUNK)]
        out = torch.cat(rows)[:, : self.dim] if rows else torch.zeros(0, self.dim, dtype=torch.float64)
        return (self.radius / self.m * out).to(self.device)

    def ideal_mse(self, x: torch.Tensor) -> torch.Tensor:
        """``E‖x̂ − x‖²`` if the candidates were i.i.d. uniform: ``R²/m² (T₂ + (1−T₂)(d−1)/(P−1)) − ‖x‖²``."""
        xc = self.preprocess(x).double()
        kept = self.t2 + (1 - self.t2) * (self.dim - 1) / max(self.P - 1, 1)
        return (self.radius / self.m) ** 2 * kept - (xc**2).sum(1)
