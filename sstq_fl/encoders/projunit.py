"""ProjUnit and FastProjUnit (Asi, Feldman, Nelson, Nguyen & Talwar, "Fast optimal locally private mean
estimation via random projections", NeurIPS 2023, §3): PrivUnitG run in a random ``k``-dimensional
projection.

**Mechanism.**  The client turns ``x`` into ``±u``, ``u = x/‖x‖``, by the sign-flip trick of
:mod:`.privunitg` (``+`` w.p. ``(1 + ‖x‖/R)/2``), projects it with a random ``W`` (``k × d``), normalises
``w = W(±u)`` to the unit sphere of ``R^k`` (``e₁`` if ``w = 0``), and sends ``y = R·PrivUnitG_k(w/‖w‖)``
(float32, ``32·k`` bits; PrivUnitG calibrated at the full ε in ``R^k``).  The server decodes ``W^T y``.
The authors assume ``‖x‖ = 1`` (no sign flip, ``R = 1``); for such inputs the two coincide.

**Projections** (``transform``).  ``dense``: ``W = √(d/k) Q^T`` with ``Q`` the ``d × k`` orthonormal factor
of a Gaussian matrix, so the row space of ``W`` is uniform (Haar); the authors orthonormalise a matrix of
*uniform* ``[0, 1)`` entries instead, whose row space leans towards ``(1, …, 1)``.  Drawing and
orthonormalising ``W`` costs ``O(d k²)`` time and ``O(d k)`` memory on both sides (about 1 GB of temporaries at
``d = 25,450``, ``k = 1000``): use ``srht`` there.  ``srht`` (FastProjUnit): ``W = √(P/k) S (H/√P) D`` on the padded
dimension ``P = 2^⌈log2 d⌉`` (``x`` zero-padded, the estimate's first ``d`` entries kept), ``D`` random
signs, ``H`` Sylvester–Hadamard, ``S`` ``k`` rows drawn without replacement: ``O(P log P)`` per client.
For ``d = P`` this is the authors' transform; they pad differently for other ``d``.

**Shared randomness** (``coin``).  ``W`` is a function of a 64-bit seed: with ``coin=message`` the client
draws ``seed_bits`` uniform bits, independent of ``x``, and sends them; with ``coin=public`` the seed comes
from the caller's public per-client coins and only ``y`` is sent.

**Privacy (exact).**  ``W`` is independent of ``x``; given ``W``, ``y`` is PrivUnitG in ``R^k`` applied to a
unit vector, which is ε-LDP over all unit inputs (:mod:`.privunitg`); mixing over the sign flip and ``W``
keeps the bound, and it is attained.

**Bias and MSE.**  The normalisation biases the estimate: ``E[x̂] = R·E_W[W^T W (±u)/‖W u‖]``.  For
``dense`` (only the row space matters and it is Haar) this is ``c·clip(x)`` with
``c = √(d/k) E[√B] = √(d/k) Γ((k+1)/2) Γ(d/2) / (Γ(k/2) Γ((d+1)/2))``, ``B ~ Beta(k/2, (d−k)/2)`` the
squared length of a projected unit vector (``c ≤ 1``, ``1 − c = O(1/k)``), and since ``W W^T = (d/k) I_k``,
``E‖x̂ − clip(x)‖² = R²(dσ² + (d/k)γσ) − (2c − 1)‖clip(x)‖²`` exactly (PrivUnitG's in ``R^d`` is
``R²(dσ² + γσ) − ‖clip(x)‖²``).  :meth:`ProjUnit.mse` declares it for ``dense`` when ``W``'s seed has at
least 32 bits (``coin=public`` or ``seed_bits=32``), the model being a Haar ``W`` per message; ``srht``'s law
is not rotation invariant (``u = e_i`` is estimated without bias, spread-out inputs are not), so its
``mse`` is ``None``.  Measured (``benchmarks/results/oracle/projunit.md``, 40,000 projections of a unit Gaussian
``x``): its factor along ``x`` equals the Haar ``c`` within the Monte-Carlo interval (``k = 100``: 0.99781 ± 0.00066
at ``d = 1024``, where ``c = 0.99775``; 0.99781 ± 0.00069 at ``d = 8192``, ``c = 0.99753``) and the part of the
bias orthogonal to ``x`` is at the noise floor; the MSE exceeds PrivUnitG's by ``(d/k − 1)γσR²`` plus
``2(1 − c)‖x‖²``: 0.1–7% at ``k = 100`` (ε = 1–8), at most 0.7% at ``k = 1000``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from .base import Encoder, Field, Messages, Param, register_encoder
from .maths.fwht import fwht_
from .privunitg import MAX_EPSILON, calibrate, check_norms, chunks, norm_bound, privatize, signed_directions
from .seeded import draw_seed, public_seeds, seed_fields, seed_params

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

DEFAULT_K = 1000
"""The authors' projection dimension (capped at ``d`` when ``k`` is not given)."""


def padded_dim(d: int) -> int:
    """``P = 2^⌈log2 d⌉``."""
    return 1 << max(0, math.ceil(math.log2(d)))


def bias_factor(d: int, k: int) -> float:
    """``c = √(d/k) E[√B]``, ``B ~ Beta(k/2, (d−k)/2)``: ``E[x̂] = c·clip(x)`` for a Haar projection."""
    if k >= d:
        return 1.0
    log_mean = math.lgamma((k + 1) / 2) + math.lgamma(d / 2) - math.lgamma(k / 2) - math.lgamma((d + 1) / 2)
    return math.sqrt(d / k) * math.exp(log_mean)


class DenseProjection:
    """``W = √(d/k) Q^T``, ``Q`` the orthonormal factor of a ``d × k`` Gaussian matrix drawn from each seed."""

    def __init__(self, d: int, k: int):
        self.d, self.k, self.scale = d, k, math.sqrt(d / k)
        self.rows_per_chunk = max(1, (1 << 21) // (d * k))

    def basis(self, wseeds: np.ndarray) -> np.ndarray:
        """``Q`` ``[n, d, k]`` (one LAPACK QR per seed, so a seed's ``Q`` never depends on the batch)."""
        g = rng.normal(wseeds, "projunit-dense", self.d * self.k).reshape(-1, self.d, self.k)
        return np.linalg.qr(g, mode="reduced")[0]

    def forward(self, u: torch.Tensor, wseeds: np.ndarray) -> torch.Tensor:
        """``W u`` ``[n, k]`` for rows ``u`` ``[n, d]``."""
        q = self.basis(wseeds)
        return torch.from_numpy(self.scale * np.matmul(u.numpy()[:, None, :], q)[:, 0, :])

    def backward(self, y: torch.Tensor, wseeds: np.ndarray) -> torch.Tensor:
        """``W^T y`` ``[n, d]`` for rows ``y`` ``[n, k]``."""
        q = self.basis(wseeds)
        return torch.from_numpy(self.scale * np.matmul(q, y.numpy()[:, :, None])[:, :, 0])


class SrhtProjection:
    """``W = √(P/k) S (H/√P) D`` on the padded dimension ``P`` (signs ``D`` and rows ``S`` from each seed)."""

    def __init__(self, d: int, k: int):
        self.d, self.k, self.P = d, k, padded_dim(d)
        self.rows_per_chunk = max(1, (1 << 21) // self.P)

    def parts(self, wseeds: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Signs ``[n, P]`` (±1.0) and the ``k`` distinct kept rows ``[n, k]``."""
        words = rng.raw_bits(wseeds, "projunit-srht-signs", -(-self.P // 64))
        bits = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), axis=1)[:, : self.P]
        rows = rng.sample_without_replacement(wseeds, "projunit-srht-rows", self.k, self.P)
        return torch.from_numpy(1.0 - 2.0 * bits), torch.from_numpy(rows)

    def forward(self, u: torch.Tensor, wseeds: np.ndarray) -> torch.Tensor:
        signs, rows = self.parts(wseeds)
        z = torch.zeros(u.shape[0], self.P, dtype=torch.float64)
        z[:, : self.d] = u * signs[:, : self.d]
        fwht_(z)
        return z.gather(1, rows) / math.sqrt(self.k)

    def backward(self, y: torch.Tensor, wseeds: np.ndarray) -> torch.Tensor:
        signs, rows = self.parts(wseeds)
        z = torch.zeros(y.shape[0], self.P, dtype=torch.float64)
        z.scatter_(1, rows, y)
        fwht_(z)
        return (z * signs)[:, : self.d] / math.sqrt(self.k)


@register_encoder("projunit")
class ProjUnit(Encoder):
    width = "k"
    params: ClassVar[dict[str, Param]] = {
        "k": Param(int, DEFAULT_K, "projection dimension (default: the authors' 1000, capped at d)", low=1),
        "transform": Param(str, "dense", "random projection: dense (Haar, ProjUnit) or srht (FastProjUnit)",
                           ("dense", "srht")),
        **seed_params("projection", seed_bits=32),
    }
    unbiased = False
    max_epsilon: ClassVar[float] = MAX_EPSILON
    bits_formula = "32 * k + seed_bits if coin == 'message' else 32 * k"
    summary = "ProjUnit/FastProjUnit: PrivUnitG after a random k-dimensional projection (Asi et al. 2023)"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        if "k" not in kw:
            self.cfg["k"] = min(DEFAULT_K, self.dim)
        self.k = self.cfg["k"]
        if self.k > self.dim:
            raise ValueError(f"projunit: k must be at most d={self.dim}, got k={self.k}")
        self.cal = calibrate(self.epsilon)
        self.proj = (DenseProjection if self.cfg["transform"] == "dense" else SrhtProjection)(self.dim, self.k)
        self.bound = self.radius * norm_bound(self.cal, self.k)

    def layout(self) -> list[Field]:
        return [Field("v", 32, self.k, kind="f32"), *seed_fields(self.cfg)]

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        n = x.shape[0]
        s = draw_seed(self, seeds)
        wseeds = public_seeds(self, s, coins, n)
        out = torch.empty(n, self.k, dtype=torch.float32)
        for sl in chunks(n, self.proj.rows_per_chunk):
            u = signed_directions(x[sl], self.radius, rng.uniform(seeds[sl], "projunit-flip", 1)[:, 0])
            w = self.proj.forward(u, wseeds[sl])
            norms = torch.linalg.vector_norm(w, dim=1, keepdim=True)
            e1 = torch.zeros_like(w)
            e1[:, 0] = 1.0
            v = torch.where(norms > 0, w / norms.clamp_min(1e-300), e1)
            out[sl] = (self.radius * privatize(v, self.cal, seeds[sl], "projunit")).float()
        fields = {"v": out.to(self.device)}
        if len(self.layout()) == 2:
            fields["s"] = torch.from_numpy(s)[:, None].to(self.device)
        return Messages(fields)

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        s = msgs.fields["s"][:, 0].cpu().numpy() if "s" in msgs.fields else np.zeros(msgs.n, np.int64)
        wseeds = public_seeds(self, s, coins, msgs.n)
        y = msgs.fields["v"].cpu().double()
        out = torch.empty(msgs.n, self.dim, dtype=torch.float64)
        for sl in chunks(msgs.n, self.proj.rows_per_chunk):
            out[sl] = self.proj.backward(y[sl], wseeds[sl])
        return out.to(self.device)

    def check(self, msgs: Messages) -> None:
        check_norms(msgs.fields["v"], self.bound, "projunit")

    def bias_factor(self) -> float | None:
        """``c`` with ``E[x̂] = c·clip(x)`` (``dense``; ``None`` for ``srht``, whose bias depends on the input)."""
        return bias_factor(self.dim, self.k) if self.cfg["transform"] == "dense" else None

    def mse(self, x: torch.Tensor) -> torch.Tensor | None:
        """``R²(dσ² + (d/k)γσ) − (2c − 1)‖clip(x)‖²`` for ``dense`` with a seed of ≥ 32 bits, else ``None``."""
        c = self.bias_factor()
        if c is None or (self.cfg["coin"] == "message" and self.cfg["seed_bits"] < 32):
            return None
        xc = self.preprocess(x).double()
        scale = self.dim * self.cal.sigma**2 + self.dim / self.k * self.cal.gamma * self.cal.sigma
        return self.radius**2 * scale - (2 * c - 1) * (xc**2).sum(1)
