"""Compression-only references: ``qsgd``, ``signsgd`` and ``randk`` — few bits, **no privacy**.

Each clips to the public ball of radius ``R`` like every encoder, then compresses the clipped vector with
no randomization for privacy (``private = False``): a message is charged to the ledger as a
:class:`~sstq_fl.privacy.events.NonPrivateEvent` (``ε = ∞``; a run reports ``epsilon_total`` as null), and
tables and figures label these encoders :data:`NON_PRIVATE_LABEL`.  They answer "how much of an LDP
encoder's error is the privacy, and how much the bit budget?".

* ``qsgd`` — Alistarh, Grubic, Li, Tomioka & Vojnović, "QSGD: communication-efficient SGD via gradient
  quantization and encoding", NeurIPS 2017, §3.1: ``‖x‖`` as float32 and, per coordinate, a sign bit and
  ``ℓ_i ∈ {0..s}``, an unbiased stochastic rounding of ``s|x_i|/‖x‖``; decode ``‖x‖ sign(x_i) ℓ_i/s``.
  Fixed-width wire ``32 + d(1 + ⌈log2(s+1)⌉)`` bits (the paper's Elias coding of the levels would shorten
  it; the fixed width is what is sent and reported).  Unbiased; exact MSE ``Σ_i ‖x‖²/s² f_i(1 − f_i)``,
  ``f_i`` the fractional part of ``s|x_i|/‖x‖``.
* ``signsgd`` — the sign of Bernstein, Wang, Azizzadenesheli & Anandkumar, "signSGD: compressed
  optimisation for non-convex problems", ICML 2018, scaled by ``‖x‖₁/d`` as in Karimireddy, Rebjock,
  Stich & Jaggi, "Error feedback fixes SignSGD and other gradient compression schemes", ICML 2019:
  ``‖x‖₁/d`` as float32 and ``d`` sign bits (the sign of 0 is ``+``); decode ``(‖x‖₁/d) sign(x)``.
  Deterministic and biased; its MSE is its deterministic error.
* ``randk`` — random-``k`` sparsification with the unbiased ``d/k`` scaling (Stich, Cordonnier & Jaggi,
  "Sparsified SGD with memory", NeurIPS 2018; Wangni, Wang, Liu & Zhang, "Gradient sparsification for
  communication-efficient distributed optimization", NeurIPS 2018): ``k`` distinct coordinates drawn
  uniformly with the client's coins, their indices (``⌈log2 d⌉`` bits each) and float32 values; decode
  ``(d/k)`` times the values at those indices.  With ``coin=public`` the indices come from the caller's
  public per-client coins and are not sent (``32k`` bits).  Unbiased; exact MSE ``(d/k − 1)‖x‖²``.

Every MSE is declared exactly, float32 rounding of the sent values included.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from .base import Encoder, Field, Messages, Param, WireError, register_encoder
from .seeded import sampled_indices

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

NON_PRIVATE_LABEL = "non-private (compression only)"
"""How tables and figures name the privacy of these encoders (never with an ε)."""
NORM_TOLERANCE = 1e-5  # relative slack on a sent norm or value (float32 rounding of the clipped vector)


class CompressionOnly(Encoder):
    """A non-private compression reference: ε is not used (default ``∞``), each message is a
    ``NonPrivateEvent``, and :attr:`privacy_label` is what tables and figures show instead of an ε."""

    private = False
    privacy_label: ClassVar[str] = NON_PRIVATE_LABEL

    def __init__(self, dim: int, epsilon: float = float("inf"), *args: Any, **kw: Any):
        super().__init__(dim, epsilon, *args, **kw)

    def _check_scale(self, values: torch.Tensor, bound: float, what: str) -> None:
        """Refuse (``WireError``) a negative, non-finite or too large ``values`` (bound ``bound`` plus slack)."""
        v = values.double()
        if not bool(torch.isfinite(v).all()) or bool((v < 0).any()):
            raise WireError(f"{self.name} message: {what} must be finite and non-negative")
        if bool((v > bound * (1 + NORM_TOLERANCE)).any()):
            raise WireError(f"{self.name} message: {what} exceeds its bound {bound:g} (clip radius {self.radius:g})")


def f32_at_least(v: torch.Tensor) -> torch.Tensor:
    """The smallest float32 value ``≥ v`` (float64 ``v``, returned as float64): a norm that is never rounded
    below the true one, so ``s|x_i|/‖x‖`` stays within ``[0, s]``."""
    near = v.to(torch.float32)
    up = torch.where(near.double() < v, torch.nextafter(near, torch.full_like(near, math.inf)), near)
    return up.double()


@register_encoder("qsgd")
class QSGD(CompressionOnly):
    width = "s"
    """QSGD with ``s`` levels (Alistarh et al., NeurIPS 2017, §3.1); fixed-width levels, no Elias coding."""

    params: ClassVar[dict[str, Param]] = {
        "s": Param(int, 1, "quantization levels: s|x_i|/||x|| is rounded stochastically to an integer in [0, s]",
                   low=1, high=65535),
    }
    unbiased = True
    bits_formula = "32 + d * (1 + ceil(log2(s + 1)))"
    summary = "QSGD: the norm, and per coordinate a sign and s-level stochastic rounding (compression only)"

    @property
    def level_bits(self) -> int:
        return math.ceil(math.log2(self.cfg["s"] + 1))

    def layout(self) -> list[Field]:
        return [Field("norm", 32, 1, kind="f32"), Field("sign", 1, self.dim),
                Field("level", self.level_bits, self.dim, limit=self.cfg["s"] + 1)]

    def _ratio(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm, r)``: the sent norm (float32, rounded up) and ``r = s|x_i|/norm ∈ [0, s]`` (0 for ``x = 0``)."""
        s = self.cfg["s"]
        norm = f32_at_least(torch.linalg.vector_norm(x, dim=1))[:, None]
        r = (s * x.abs() / norm.clamp_min(1e-300)).clamp_max(s)
        return norm, torch.where(norm > 0, r, torch.zeros_like(r))

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        xd = x.double()
        norm, r = self._ratio(xd)
        u = torch.from_numpy(rng.uniform(seeds, "qsgd-round", self.dim)).to(xd.device)
        low = r.floor()
        level = (low + (u < r - low).double()).long().clamp_max(self.cfg["s"])
        return Messages({"norm": norm.float(), "sign": (xd < 0).long(), "level": level})

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        f = {k: v.to(self.device) for k, v in msgs.fields.items()}
        sign = 1.0 - 2.0 * f["sign"].double()
        return f["norm"].double() / self.cfg["s"] * sign * f["level"].double()

    def check(self, msgs: Messages) -> None:
        self._check_scale(msgs.fields["norm"], self.radius, "the norm")

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        norm, r = self._ratio(self.preprocess(x).double())
        frac = r - r.floor()
        return (norm[:, 0] / self.cfg["s"]) ** 2 * (frac * (1 - frac)).sum(1)


@register_encoder("signsgd")
class SignSGD(CompressionOnly):
    """Scaled sign compression ``(‖x‖₁/d) sign(x)`` (Bernstein et al., ICML 2018; Karimireddy et al., ICML
    2019); deterministic and biased, the sign of 0 is ``+``."""

    unbiased = False
    bits_formula = "32 + d"
    summary = "scaled sign: ||x||_1/d and d sign bits (deterministic, biased; compression only)"

    def layout(self) -> list[Field]:
        return [Field("scale", 32, 1, kind="f32"), Field("sign", 1, self.dim)]

    def _scale(self, x: torch.Tensor) -> torch.Tensor:
        """``‖x‖₁/d`` rounded to float32, ``[n, 1]`` float64."""
        return (x.abs().sum(1, keepdim=True) / self.dim).float().double()

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        xd = x.double()
        return Messages({"scale": self._scale(xd).float(), "sign": (xd < 0).long()})

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        scale = msgs.fields["scale"].to(self.device).double()
        return scale * (1.0 - 2.0 * msgs.fields["sign"].to(self.device).double())

    def check(self, msgs: Messages) -> None:
        self._check_scale(msgs.fields["scale"], self.radius / math.sqrt(self.dim), "the scale ||x||_1/d")

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        xc = self.preprocess(x).double()
        est = self._scale(xc) * torch.where(xc < 0, -1.0, 1.0).double()
        return ((est - xc) ** 2).sum(1)


@register_encoder("randk")
class RandK(CompressionOnly):
    width = "k"
    """Random-``k`` sparsification scaled by ``d/k`` (Stich et al., NeurIPS 2018; Wangni et al., NeurIPS
    2018); ``coin=public`` derives the indices from the caller's public per-client coins."""

    params: ClassVar[dict[str, Param]] = {
        "k": Param(int, 1, "coordinates sent (1 <= k <= d), each scaled by d/k", low=1),
        "coin": Param(str, "private", "private coin sends the indices; public coin derives them from coins",
                      ("private", "public")),
    }
    unbiased = True
    bits_formula = "k * (ceil(log2(d)) + 32) if coin == 'private' else 32 * k"
    summary = "random-k sparsification with d/k scaling: k indices and float32 values (compression only)"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        if self.cfg["k"] > self.dim:
            raise ValueError(f"encoder 'randk': parameter 'k' must be at most d = {self.dim}, got {self.cfg['k']}")
        self.k = self.cfg["k"]

    def layout(self) -> list[Field]:
        out = [Field("val", 32, self.k, kind="f32")]
        if self.cfg["coin"] == "private":
            out.append(Field("idx", math.ceil(math.log2(self.dim)), self.k, limit=self.dim))
        return out

    def _indices(self, seeds: np.ndarray | None, coins: Any, n: int) -> torch.Tensor:
        """The ``k`` distinct coordinates of each client: from its public coin, or its own seed."""
        return torch.from_numpy(sampled_indices(self, seeds, coins, n, self.k, self.dim))

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        idx = self._indices(seeds, coins, x.shape[0]).to(x.device)
        fields = {"val": x.gather(1, idx).float()}
        if self.cfg["coin"] == "private":
            fields["idx"] = idx
        return Messages(fields)

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        idx = msgs.fields["idx"] if "idx" in msgs.fields else self._indices(None, coins, msgs.n)
        val = msgs.fields["val"].to(self.device).double() * (self.dim / self.k)
        out = torch.zeros(msgs.n, self.dim, dtype=torch.float64, device=self.device)
        return out.scatter_(1, idx.to(self.device), val)

    def check(self, msgs: Messages) -> None:
        if "idx" in msgs.fields:
            srt = msgs.fields["idx"].sort(1).values
            if bool((srt[:, 1:] == srt[:, :-1]).any()):
                raise WireError("randk message repeats an index (the k indices must be distinct)")
        self._check_scale(torch.linalg.vector_norm(msgs.fields["val"].double(), dim=1), self.radius,
                          "the norm of the values")

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        """``Σ_i (k/d)((d/k)v_i − x_i)² + (1 − k/d)x_i²`` with ``v = float32(x)``: ``(d/k − 1)‖x‖²`` up to
        float32 rounding."""
        xc = self.preprocess(x).double()
        v, p = xc.float().double(), self.k / self.dim
        return (p * (v / p - xc) ** 2 + (1 - p) * xc**2).sum(1)
