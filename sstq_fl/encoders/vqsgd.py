"""vqSGD with cross-polytope randomized response (Gandikota, Kane, Maity, Mazumdar, AISTATS 2021).

Scale to the unit ball (``x/R``).  The ``2d`` vertices ``±√d e_i`` (index ``i`` for ``+e_i``,
``d + i`` for ``-e_i``) get weights ``a_i^± = max(±x_i, 0)/√d + γ/(2d)`` with
``γ = 1 − ‖x‖₁/√d ≥ 0``; they sum to 1 and average to ``x``.  Sample a vertex, then ``2d``-ary
randomized response (keep w.p. ``e^ε/(e^ε+2d−1)``).  Decode the received vertex times
``R (e^ε+2d−1)/(e^ε−1)`` (unbiased: the vertices sum to zero).
Bits ``⌈log2 d⌉ + 1``; exact MSE ``R² d ((e^ε+2d−1)/(e^ε−1))² − ‖x‖²`` (cubic in ``d``).
Any finite ε is accepted (the probabilities and the gain are computed from ``e^{−ε}`` where
``e^ε`` would overflow).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import rng
from ..lazy import lazy_module
from ..privacy.events import flat_rr_probabilities
from ..privacy.floats import EXP_SAFE
from .base import Encoder, Field, Messages, register_encoder

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")


def _decode_scale(radius: float, epsilon: float, k: int) -> float:
    """``R (e^ε+k−1)/(e^ε−1)`` (``R`` over the correlation of ``k``-ary RR); computed as
    ``R (1+(k−1)e^{−ε})/(1−e^{−ε})`` above :data:`~sstq_fl.privacy.floats.EXP_SAFE` (no overflow)."""
    if epsilon <= EXP_SAFE:
        return radius * (math.exp(epsilon) + k - 1) / math.expm1(epsilon)
    return radius * ((1 + (k - 1) * math.exp(-epsilon)) / -math.expm1(-epsilon))


@register_encoder("vqsgd")
class VqSGD(Encoder):
    unbiased = True
    bits_formula = "ceil(log2(d)) + 1"
    summary = "cross-polytope vector quantization + 2d-ary randomized response"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        k = 2 * self.dim
        self.p, self.q = flat_rr_probabilities(self.epsilon, k)
        self.scale = _decode_scale(self.radius, self.epsilon, k)

    def layout(self) -> list[Field]:
        return [Field("v", max(1, math.ceil(math.log2(2 * self.dim))), 1, limit=2 * self.dim)]

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        d = self.dim
        xs = (x / self.radius).double()
        gamma = (1.0 - xs.abs().sum(1, keepdim=True) / math.sqrt(d)).clamp_min(0.0)
        w = torch.cat([xs.clamp_min(0), (-xs).clamp_min(0)], 1) / math.sqrt(d) + gamma / (2 * d)
        cum = torch.cumsum(w, 1)
        u = torch.from_numpy(rng.uniform(seeds, "vqsgd", 3)).to(x.device)
        v = torch.searchsorted(cum, (u[:, :1] * cum[:, -1:]).contiguous(), right=True)[:, 0].clamp_max(2 * d - 1)
        other = torch.minimum((u[:, 2] * (2 * d - 1)).long(), torch.tensor(2 * d - 2))
        other = other + (other >= v).long()
        z = torch.where(u[:, 1] < self.p, v, other)
        return Messages({"v": z[:, None]})

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        z = msgs.fields["v"][:, 0].to(self.device)
        out = torch.zeros(z.shape[0], self.dim, dtype=torch.float64, device=self.device)
        sign = torch.where(z < self.dim, 1.0, -1.0).double()
        out[torch.arange(z.shape[0], device=self.device), z % self.dim] = sign * math.sqrt(self.dim) * self.scale
        return out

    def _contribution(self, msgs: Messages, coins: Any) -> torch.Tensor:
        z = msgs.fields["v"][:, 0].to(self.device)
        sign = torch.where(z < self.dim, 1.0, -1.0).double()
        acc = torch.zeros(self.dim, dtype=torch.float64, device=self.device)
        return acc.index_add_(0, z % self.dim, sign * math.sqrt(self.dim) * self.scale)

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        xc = self.preprocess(x).double()
        return self.dim * self.scale**2 - (xc**2).sum(1)

    def output_law(self, x: torch.Tensor) -> tuple[Messages, torch.Tensor]:
        """Every message (vertex ``v`` in ``0..2d−1``) and its exact probability per input row: the vertex
        weights ``a^±`` (module docstring) times the ``2d``-ary randomized response channel."""
        d = self.dim
        xs = (self.preprocess(x) / self.radius).double()
        gamma = (1.0 - xs.abs().sum(1, keepdim=True) / math.sqrt(d)).clamp_min(0.0)
        w = torch.cat([xs.clamp_min(0), (-xs).clamp_min(0)], 1) / math.sqrt(d) + gamma / (2 * d)
        w = w / w.sum(1, keepdim=True)  # the sampler draws from the normalised cumulative weights
        return Messages({"v": torch.arange(2 * d)[:, None]}), w @ self.label_channel().to(w.device)

    def label_channel(self) -> torch.Tensor:
        k = 2 * self.dim
        return torch.full((k, k), self.q, dtype=torch.float64).fill_diagonal_(self.p)
