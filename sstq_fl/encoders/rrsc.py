"""RRSC — randomly rotating simplex coding (Isik, Chen, Özgür, Weissman, No, "Exact optimality of
communication-privacy-utility tradeoffs in distributed mean estimation", NeurIPS 2023: the RRSC mechanism).

**Mechanism.**  The codebook is the ``M`` vertices of the regular simplex, ``s_j = (M e_j − 1)/√(M(M−1))``
in the first ``M`` coordinates (``M = 2^bits``, or ``codewords``; ``M ≤ d``), turned by a random
``d × M`` matrix ``A`` with orthonormal columns: ``c_j = A s_j``.  The unit direction is ``u = x/‖x‖``,
flipped to ``−u`` w.p. ``(1 − ‖x‖/R)/2`` (PrivUnit2's reduction, Bhowmick et al. 2018, so that
``E[±u] = x/R``).  The ``k`` codewords with the largest scores ``⟨u, c_j⟩`` get weight ``e^ε``, the
others 1; the client sends ``K`` drawn with these weights (``bits`` bits) and the server decodes
``x̂ = R · scale · c_K``, ``scale = (k e^ε + M − k)/((e^ε − 1) E[top-k score sum])``.  Every index has
probability in ``[1/Z, e^ε/Z]``, ``Z = k e^ε + M − k``, for *every* ``A``: ε is exact (attained by
``x``, ``−x``), so :attr:`~IndexEncoder.output_law` gives the law and the conformance kit checks it exactly.

**Calibration (exact).**  For Haar ``A``, ``y = Aᵀu`` is the first ``M`` coordinates of a uniform point
of ``S^{d−1}``, and ``⟨u, c_j⟩ = √(M/(M−1)) (y_j − ȳ)``, so ``E[top-k score sum] = √(M/(M−1)) E[top-k
of y]``; with ``g ~ N(0, I_d)``, ``y = g_{1..M}/‖g‖`` and ``g/‖g‖ ⫫ ‖g‖`` give ``E[top-k of y] =
T_k(M) / E‖g‖``, ``E‖g‖ = √2 Γ((d+1)/2)/Γ(d/2)``, where ``T_k(M)`` is the expected sum of the ``k``
largest of ``M`` i.i.d. ``N(0, 1)``; integrating by parts, ``T_k(M) = M E[φ(Φ⁻¹(B))]``,
``B ~ Beta(k, M−k)`` (one quadrature).  Rotation equivariance gives ``E[x̂] = x`` and, as
``‖c_K‖ = 1``, the exact ``E‖x̂ − x‖² = R² scale² − ‖x‖²``.  ``k = 0`` (default) takes the ``k`` in
``1..M−1`` minimising it (the authors search ``k < 50`` with a Monte-Carlo estimate of the mean).

**Rotation source.** ``coin=message`` (default): the client draws a ``seed_bits``-bit seed independent of ``x``
and sends it (``bits + seed_bits`` bits); ``A`` is then one of ``2^seed_bits`` rotations, so ``E[x̂]`` is the
average over that finite family, not over Haar: a fixed bias of relative size about ``2^{−seed_bits/2}`` of the
spread of ``E[x̂ | A]``, itself below that of ``x̂``, so the mean of ``n`` messages has its MSE raised by at most
about ``n/2^seed_bits`` (0.5% for 5,000 clients at the default 20 bits). ``coin=public``: ``A`` comes from
public per-client coins shared with the server (Isik et al.'s shared randomness; ``bits`` bits), which the
training engine does not supply. ``bits = 0`` (default) sends ``min(⌈ε⌉, ⌊log2 d⌋, 8)`` index bits (the authors
run ``bits = ε``), fewer where a Haar rotation would cost more than :data:`HAAR_COST`. ``A`` is the QR factor of
a ``d × M`` Gaussian with ``R``'s diagonal made positive (exactly Haar), ``O(d M²)`` per client on each side.

**rrsc-fast.**  ``A`` is the first ``M`` columns of ``(H D₁ H D₂ H D₃)ᵀ/P^{3/2}`` on the padded
dimension ``P = 2^⌈log2 d⌉`` (``H`` Sylvester–Hadamard, ``D`` random signs from the rotation seed; the
codewords live in ``R^P``, decoded on the first ``d`` coordinates, ``M ≤ P``): scores and decoding cost
``O(P log P)``, calibrated in the Haar model on ``S^{P−1}``.  Privacy is exact as for any rotation;
unbiasedness only approximate, so ``unbiased = False`` and ``mse`` is ``None``.  Measured (ε = 2,
``‖x‖ = 0.8 R``, 3·10⁴ messages): ``n‖x̄̂ − x‖²/MSE``, about 1 ± √(2/d) when unbiased, is 1.17 (d = 24, bits = 3),
1.32 (d = 32, bits = 3), 0.98 (d = 128, bits = 4) and 1.08 (d = 200, bits = 4); at ``d = P`` the MSE equals the
Haar formula on ``S^{P−1}`` within 0.04% (55.67 vs 55.65 at d = 32; 218.47 vs 218.46 at d = 128), below it
for ``d < P`` (0.75× at d = 24, 0.78× at d = 200: only ``d`` of the ``P`` coordinates are decoded).

**Differences from the authors' code.**  Their ``A`` is numpy's QR factor without the sign correction,
which is not Haar (LAPACK's Householder signs make ``A_ii`` negative 94% of the time at d = 50, M = 8);
their mean is a 10⁶-sample Monte Carlo estimate (ours is the integral above); they search ``k < 50`` and
handle unit inputs only.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from .base import Encoder, Field, Messages, Param, register_encoder
from .maths.fwht import fwht_
from .privunit_mrc import padded_dim
from .seeded import draw_seed, public_seeds, seed_fields, seed_params

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

MAX_BITS = 16
"""Largest ``bits`` (``M = 2^16`` codewords; ``rrsc`` also needs ``M ≤ d``)."""
HAAR_COST = 2**32
"""Largest ``d·M²`` (the flops of one Haar rotation, about 1 s) ``rrsc`` accepts; beyond it, use ``rrsc-fast``."""
LAW_LIMIT = 2**18
"""Most messages :meth:`IndexEncoder.output_law` enumerates (``2^seed_bits`` seeds × indices, coin=message)."""
CHUNK_ELEMS = 2**22
"""Clients per batch are chosen so that one batch's public matrices hold about this many numbers."""


@lru_cache(maxsize=8192)
def top_sum(m: int, k: int) -> float:
    """``T_k(m)``: the expected sum of the ``k`` largest of ``m`` i.i.d. ``N(0, 1)`` (``1 ≤ k < m``),
    as ``m ∫₀¹ φ(Φ⁻¹(q)) f_{Beta(k, m−k)}(q) dq`` (relative accuracy about 1e-12)."""
    from scipy import integrate, special
    if not 1 <= k < m:
        raise ValueError(f"top_sum needs 1 <= k < m, got k={k}, m={m}")
    mu = k / m
    sd = math.sqrt(mu * (1 - mu) / (m + 1))
    lbeta = special.betaln(k, m - k)

    def integrand(q: float) -> float:
        z = float(special.ndtri(q))
        return math.exp(-z * z / 2 + (k - 1) * math.log(q) + (m - k - 1) * math.log1p(-q) - lbeta)

    lo, hi = max(0.0, mu - 40 * sd), min(1.0, mu + 40 * sd)
    pts = [p for p in (mu - 3 * sd, mu, mu + 3 * sd) if lo < p < hi]
    val = integrate.quad(integrand, lo, hi, points=pts, epsabs=0.0, epsrel=1e-12, limit=200)[0]
    return m * val / math.sqrt(2 * math.pi)


def mean_norm(d: int) -> float:
    """``E‖g‖`` for ``g ~ N(0, I_d)``: ``√2 Γ((d+1)/2)/Γ(d/2)``."""
    return math.sqrt(2) * math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2))


def score_mean(d: int, m: int, k: int) -> float:
    """``E[sum of the top-k scores ⟨u, c_j⟩]`` for a Haar rotation of the ``m``-simplex in ``R^d``."""
    return math.sqrt(m / (m - 1)) * top_sum(m, k) / mean_norm(d)


def decode_scale(d: int, m: int, k: int, epsilon: float) -> float:
    """``(k e^ε + m − k)/((e^ε − 1) E[top-k score sum])``: the gain that makes ``x̂`` unbiased."""
    e = math.expm1(epsilon)
    return (k * e + m) / (e * score_mean(d, m, k))


@lru_cache(maxsize=1024)
def best_k(m: int, epsilon: float) -> int:
    """The ``k`` in ``1..m−1`` with the smallest ``scale`` (it does not depend on ``d``).

    ``(k(e^ε−1) + m)/T_k`` is a linear function over a concave one, hence unimodal in ``k``: brute force up to
    ``m = 256``, an integer ternary search beyond."""
    e = math.expm1(epsilon)

    def cost(k: int) -> float:
        return (k * e + m) / top_sum(m, k)

    lo, hi = 1, m - 1
    while hi - lo > 256:
        a, b = lo + (hi - lo) // 3, hi - (hi - lo) // 3
        if cost(a) <= cost(b):
            hi = b
        else:
            lo = a
    return min(range(lo, hi + 1), key=cost)


def vertex_rows(m: int, k: torch.Tensor) -> torch.Tensor:
    """``[n, m]``: row ``i`` is the simplex vertex ``s_{k_i} = (m e_{k_i} − 1)/√(m(m−1))`` (built per message, so
    memory is ``n m``, never ``m²``)."""
    out = torch.full((k.shape[0], m), -1.0, dtype=torch.float64)
    out[torch.arange(k.shape[0]), k.long()] += m
    return out / math.sqrt(m * (m - 1))


def haar_columns(rot: np.ndarray, d: int, m: int) -> torch.Tensor:
    """``[n, d, m]``: per rotation seed, ``m`` orthonormal columns, Haar distributed (QR of a Gaussian,
    ``R``'s diagonal made positive)."""
    g = torch.from_numpy(rng.normal(rot, "rrsc-rotation", d * m)).reshape(-1, d, m)
    q, r = torch.linalg.qr(g)
    sign = torch.where(torch.diagonal(r, dim1=1, dim2=2) < 0, -1.0, 1.0).double()
    return q * sign[:, None, :]


def directions(x: torch.Tensor, flip_coin: np.ndarray, radius: float) -> torch.Tensor:
    """``±x/‖x‖`` (``−`` w.p. ``(1 − ‖x‖/R)/2``; ``e₁`` for ``x = 0``) ``[n, d]`` float64."""
    u, norms = unit_rows(x)
    flip = torch.from_numpy(flip_coin[:, None]) >= (1 + norms / radius) / 2
    return torch.where(flip, -u, u)


def unit_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x/‖x‖, ‖x‖)`` row by row, ``e₁`` for a zero row (float64, CPU)."""
    xd = x.double().cpu()
    norms = torch.linalg.vector_norm(xd, dim=1, keepdim=True)
    e1 = torch.zeros(1, xd.shape[1], dtype=torch.float64)
    e1[0, 0] = 1.0
    return torch.where(norms > 0, xd / norms.clamp_min(1e-300), e1), norms


class IndexEncoder(Encoder):
    """Shared machinery of an encoder that sends one index into ``size`` public choices named by a seed.

    Subclasses set ``size`` and ``gain`` and implement :meth:`_matrix` (the public ``[c, d, size]`` score
    matrices of ``c`` seeds), :meth:`_law` (the index law given the scores, any leading shape) and
    :meth:`_directions_of` (the decoded unit vectors); :meth:`_scores` may be overridden for speed.
    """

    size: int
    gain: float
    bits: int

    def layout(self) -> list[Field]:
        bits = self.bits
        return [Field("k", bits, limit=self.size if self.size < 1 << bits else None), *seed_fields(self.cfg)]

    def chunk(self) -> int:
        return max(1, CHUNK_ELEMS // (self.dim * self.size))

    def _scores(self, u: torch.Tensor, pub: np.ndarray) -> torch.Tensor:
        """``[n, size]`` scores of the rows ``u`` against their own public matrices."""
        return torch.einsum("nd,ndm->nm", u, self._matrix(pub))

    @abstractmethod
    def _matrix(self, pub: np.ndarray) -> torch.Tensor:
        """The public ``[c, d, size]`` score matrices of ``c`` public seeds."""

    @abstractmethod
    def _law(self, scores: torch.Tensor) -> torch.Tensor:
        """The index law given the scores (any leading shape; the last axis is the ``size`` choices)."""

    @abstractmethod
    def _directions_of(self, k: torch.Tensor, pub: np.ndarray) -> torch.Tensor:
        """The decoded unit vectors ``[n, d]`` of indices ``k`` under their public seeds."""

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        n, step = x.shape[0], self.chunk()
        s = draw_seed(self, seeds)
        pub = public_seeds(self, s, coins, n)
        coin = rng.uniform(seeds, self.name, 2)
        u = directions(x, coin[:, 0], self.radius)
        parts = []
        for i in range(0, n, step):
            law = self._law(self._scores(u[i : i + step], pub[i : i + step]))
            c = torch.from_numpy(np.ascontiguousarray(coin[i : i + step, 1:2]))
            parts.append(torch.searchsorted(law.cumsum(1), c, right=True)[:, 0].clamp_max(self.size - 1))
        k = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)
        fields = {"k": k[:, None].to(self.device)}
        if len(self.layout()) == 2:
            fields["s"] = torch.from_numpy(s)[:, None].to(self.device)
        return Messages(fields)

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        k = msgs.fields["k"][:, 0].cpu().long()
        s = msgs.fields["s"][:, 0].cpu().numpy() if "s" in msgs.fields else np.zeros(msgs.n, np.int64)
        pub, step = public_seeds(self, s, coins, msgs.n), self.chunk()
        rows = [self._directions_of(k[i : i + step], pub[i : i + step]) for i in range(0, msgs.n, step)]
        out = torch.cat(rows) if rows else torch.zeros(0, self.dim, dtype=torch.float64)
        return (self.radius * self.gain * out).to(self.device)

    def index_law(self, x: torch.Tensor, pub: np.ndarray) -> torch.Tensor:
        """Exact ``P(K = k | x)`` ``[n, size]`` given each row's public seed (the sign-flip mixture included)."""
        u, norms = unit_rows(self.preprocess(x))
        keep = (1 + norms / self.radius) / 2
        sc = self._scores(u, pub)
        return keep * self._law(sc) + (1 - keep) * self._law(-sc)

    @property
    def output_law(self) -> Callable[..., tuple[Messages, torch.Tensor]] | None:
        """:meth:`message_law` where the message space can be enumerated (``coin=public``, or ``coin=message`` with
        ``2^seed_bits · size ≤`` :data:`LAW_LIMIT`), else ``None`` (the conformance kit then audits ε instead)."""
        if self.cfg["coin"] == "message" and (1 << self.cfg["seed_bits"]) * self.size > LAW_LIMIT:
            return None
        return self.message_law

    def message_law(self, x: torch.Tensor, coins: Any = None) -> tuple[Messages, torch.Tensor]:
        """Every message and its exact probability per row of ``x``.

        ``coin=public`` with ``coins`` (one per row, or one for all): the law given those public choices, whose
        worst ratio over inputs is the guarantee.  Without ``coins``: the law with the public choices integrated
        out, which is uniform (the choices' law is invariant under relabelling the indices), as the conformance kit
        samples it with fresh coins per message.  ``coin=message``: the law of ``(k, s)`` over all
        ``2^seed_bits`` seeds (at most :data:`LAW_LIMIT` messages)."""
        xs = self.preprocess(x)
        idx = torch.arange(self.size)
        if self.cfg["coin"] == "public":
            law = (self.index_law(xs, public_seeds(self, None, coins, xs.shape[0])) if coins is not None
                   else torch.full((xs.shape[0], self.size), 1.0 / self.size, dtype=torch.float64))
            return Messages({"k": idx[:, None]}), law
        n_seeds = 1 << self.cfg["seed_bits"]
        if n_seeds * self.size > LAW_LIMIT:
            raise ValueError(f"{self.spec}: the law has {n_seeds * self.size} messages (limit {LAW_LIMIT}); "
                             f"lower seed_bits")
        return self._seed_enumeration(xs, n_seeds)

    def _seed_enumeration(self, xs: torch.Tensor, n_seeds: int) -> tuple[Messages, torch.Tensor]:
        u, norms = unit_rows(xs)
        keep = (1 + norms / self.radius)[:, :, None] / 2
        laws = []
        step = max(1, CHUNK_ELEMS // (self.dim * self.size))
        for lo in range(0, n_seeds, step):
            pub = public_seeds(self, np.arange(lo, min(lo + step, n_seeds)), None, 0)
            sc = torch.einsum("nd,cdm->ncm", u, self._matrix(pub))
            laws.append(keep * self._law(sc) + (1 - keep) * self._law(-sc))
        law = torch.cat(laws, 1).reshape(xs.shape[0], -1) / n_seeds
        fields = {"k": torch.arange(self.size).repeat(n_seeds)[:, None]}
        if n_seeds > 1:
            fields["s"] = torch.arange(n_seeds).repeat_interleave(self.size)[:, None]
        return Messages(fields), law


@register_encoder("rrsc")
class RRSC(IndexEncoder):
    width = "bits"
    params: ClassVar[dict[str, Param]] = {
        "bits": Param(int, 0, "index bits: M = 2^bits simplex codewords (0: min(ceil(ε), floor(log2 d), 8))", low=0,
                      high=MAX_BITS),
        "k": Param(int, 0, "codewords given weight e^ε (0: the MSE-optimal k)", low=0, high=2**MAX_BITS - 1),
        "codewords": Param(int, 0, "simplex size M ≤ 2^bits (0: M = 2^bits)", low=0, high=2**MAX_BITS),
        **seed_params("rotation"),
    }
    unbiased = True
    bits_formula = "bits + seed_bits if coin == 'message' else bits"
    summary = "randomly rotating simplex coding: top-k codewords weighted e^eps (Isik et al. 2023)"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.calib_dim = self._space_dim()
        if self.dim < 2:
            raise ValueError(f"{self.name} needs dim >= 2, got {self.dim}")
        self.bits = self.cfg["bits"] or self.auto_bits()
        m = self.cfg.get("codewords", 0) or 1 << self.bits
        if not 2 <= m <= 1 << self.bits:
            raise ValueError(f"{self.name}: codewords must be in [2, 2^bits = {1 << self.bits}], got {m} (d={self.dim})")
        if m > self.calib_dim:
            raise ValueError(f"{self.name}: M = {m} codewords need dimension >= M, got {self.calib_dim} (lower bits)")
        self.check_cost(m)
        self.size = self.M = m
        self.k = self.cfg["k"] or best_k(m, self.epsilon)
        if not 1 <= self.k < m:
            raise ValueError(f"{self.name}: k must be in [1, M-1 = {m - 1}], got {self.k}")
        self.scale = decode_scale(self.calib_dim, m, self.k, self.epsilon)
        self.gain = self.scale

    def _space_dim(self) -> int:
        return self.dim

    def auto_bits(self) -> int:
        """``bits = 0``: ``min(⌈ε⌉, ⌊log2 D⌋, 8)`` (``D``: the codewords' dimension), lowered to the cost limit."""
        bits = min(max(1, math.ceil(self.epsilon)), int(math.log2(self.calib_dim)), 8)
        while bits > 1 and self.too_costly(1 << bits):
            bits -= 1
        return bits

    def too_costly(self, m: int) -> bool:
        return self.dim * m * m > HAAR_COST

    def check_cost(self, m: int) -> None:
        if self.too_costly(m):
            raise ValueError(f"rrsc: a Haar rotation costs d*M^2 = {self.dim * m * m:.3g} flops per client "
                             f"(limit {HAAR_COST:.3g}); use rrsc-fast")

    def bits_quantities(self) -> dict[str, Any]:
        return {**super().bits_quantities(), "bits": self.bits}

    def _matrix(self, pub: np.ndarray) -> torch.Tensor:
        return haar_columns(pub, self.dim, self.M)

    def _law(self, scores: torch.Tensor) -> torch.Tensor:
        """``e^ε/Z`` on the ``k`` largest scores, ``1/Z`` elsewhere (scores of ``y = Aᵀu`` rank as the simplex
        scores ``√(M/(M−1))(y_j − ȳ)`` do).  Scores tied with the ``k``-th largest share its remaining ``e^ε``
        weights evenly (ties are exact with Hadamard rotations), so the law is a function of the score set."""
        tau = torch.topk(scores, self.k, dim=-1).values[..., -1:]
        above, tied = scores > tau, scores == tau
        share = (self.k - above.sum(-1, keepdim=True)) / tied.sum(-1, keepdim=True)
        top = above.double() + tied.double() * share
        return (1.0 + math.expm1(self.epsilon) * top) / (self.k * math.exp(self.epsilon) + self.M - self.k)

    def _directions_of(self, k: torch.Tensor, pub: np.ndarray) -> torch.Tensor:
        """``c_K = A s_K`` ``[n, d]``."""
        return torch.einsum("ndm,nm->nd", self._matrix(pub), vertex_rows(self.M, k))

    def mse(self, x: torch.Tensor) -> torch.Tensor | None:
        """``R² scale² − ‖clip(x)‖²`` (exact for the Haar rotation)."""
        xc = self.preprocess(x).double()
        return (self.radius * self.scale) ** 2 - (xc**2).sum(1)


@register_encoder("rrsc-fast")
class RRSCFast(RRSC):
    params: ClassVar[dict[str, Param]] = {k: v for k, v in RRSC.params.items() if k != "codewords"}
    unbiased = False
    summary = "RRSC with a structured Hadamard rotation (O(P log P) per client; approximately unbiased)"

    def _space_dim(self) -> int:
        self.P = padded_dim(self.dim)
        return self.P

    def too_costly(self, m: int) -> bool:
        return False

    def chunk(self) -> int:
        return max(1, CHUNK_ELEMS // (4 * self.P))

    def signs(self, pub: np.ndarray) -> torch.Tensor:
        """``[n, 3, P]`` random ±1 of the three sign layers, a pure function of each rotation seed."""
        nbits = 3 * self.P
        words = rng.raw_bits(pub, "rrsc-fast-signs", -(-nbits // 64))
        bits = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), axis=1)[:, :nbits]
        return torch.from_numpy(1.0 - 2.0 * bits.astype(np.float64)).reshape(-1, 3, self.P)

    def _rotate(self, v: torch.Tensor, sg: torch.Tensor) -> torch.Tensor:
        """``W v`` with ``W = H D₁ H D₂ H D₃ / P^{3/2}`` for rows ``v`` ``[n, P]``: ``y = Aᵀu``."""
        y = v.clone()
        for layer in (2, 1, 0):
            y.mul_(sg[:, layer])
            fwht_(y)
        return y / self.P**1.5

    def _unrotate(self, y: torch.Tensor, sg: torch.Tensor) -> torch.Tensor:
        """``Wᵀ y``."""
        v = y.clone()
        for layer in (0, 1, 2):
            fwht_(v)
            v.mul_(sg[:, layer])
        return v / self.P**1.5

    def _scores(self, u: torch.Tensor, pub: np.ndarray) -> torch.Tensor:
        v = torch.nn.functional.pad(u, (0, self.P - self.dim))
        return self._rotate(v, self.signs(pub))[:, : self.M]

    def _matrix(self, pub: np.ndarray) -> torch.Tensor:
        """``[c, d, M]``: ``A``'s first ``d`` rows (for enumerating laws at small ``d``)."""
        sg = self.signs(pub)
        eye = torch.eye(self.P, dtype=torch.float64)[: self.dim]
        return torch.stack([self._rotate(eye, sg[i : i + 1].expand(self.dim, 3, self.P))[:, : self.M]
                            for i in range(len(pub))])

    def _directions_of(self, k: torch.Tensor, pub: np.ndarray) -> torch.Tensor:
        y = torch.zeros(k.shape[0], self.P, dtype=torch.float64)
        y[:, : self.M] = vertex_rows(self.M, k)
        return self._unrotate(y, self.signs(pub))[:, : self.dim]

    def mse(self, x: torch.Tensor) -> None:
        return None
