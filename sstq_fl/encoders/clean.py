"""``clean``: the clipped vector itself as float32 — no privacy, ``32 d`` bits (accuracy ceiling)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..lazy import lazy_module
from .base import Encoder, Field, Messages, register_encoder

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

NORM_TOLERANCE = 1e-5  # relative slack on a message's norm (float32 rounding of the clipped vector)


@register_encoder("clean")
class Clean(Encoder):
    unbiased = True
    private = False
    bits_formula = "32 * d"
    summary = "no privacy: the clipped float32 vector"

    def __init__(self, dim: int, epsilon: float = float("inf"), *args: Any, **kw: Any):
        super().__init__(dim, epsilon, *args, **kw)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "epsilon": None}

    def layout(self) -> list[Field]:
        return [Field("x", 32, self.dim, kind="f32")]

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        return Messages({"x": x.to(torch.float32)})

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        return msgs.fields["x"].to(self.device, torch.float64)

    def check(self, msgs: Messages) -> None:
        from .base import WireError

        norms = torch.linalg.vector_norm(msgs.fields["x"].double(), dim=1)
        if bool((norms > self.radius * (1 + NORM_TOLERANCE)).any()):
            raise WireError(f"clean message norm exceeds the clip radius {self.radius}")

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        xc = self.preprocess(x)
        return ((xc.float().double() - xc.double()) ** 2).sum(1)
