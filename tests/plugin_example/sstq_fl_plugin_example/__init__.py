"""Example plug-in: one randomly sampled coordinate, one bit, binary randomized response.

Client: ``J ~ Uniform{0..d-1}``; ``bit = +1`` w.p. ``(1 + x_J/R)/2`` else ``-1``; keep the bit
w.p. ``p = e^ε/(1+e^ε)``.  Server: ``x̂ = d R bit e_J / (2p − 1)`` (unbiased).  Payload:
``⌈log2 d⌉ + 1`` bits.  Pure ε-LDP (the bit channel's ratio is ``p/(1−p) = e^ε``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from sstq_fl import rng
from sstq_fl.encoders import Encoder, Field, Messages


class RRCoordinate(Encoder):
    unbiased = True
    bits_formula = "ceil(log2(d)) + 1"
    summary = "example plug-in: one coordinate, one bit, binary RR"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.p = 1.0 / (1.0 + math.exp(-self.epsilon))

    def layout(self) -> list[Field]:
        return [Field("j", max(1, math.ceil(math.log2(self.dim))), 1, limit=self.dim), Field("bit", 1, 1)]

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        j = torch.from_numpy(rng.randint(seeds, "rr-coordinate-j", 1, self.dim))
        u = torch.from_numpy(rng.uniform(seeds, "rr-coordinate", 2))
        xj = x.double().gather(1, j)[:, 0] / self.radius
        bit = (u[:, 0] < (1 + xj) / 2).long()
        bit = torch.where(u[:, 1] < self.p, bit, 1 - bit)
        return Messages({"j": j, "bit": bit[:, None]})

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        j = msgs.fields["j"][:, 0]
        sign = 2.0 * msgs.fields["bit"][:, 0].double() - 1.0
        out = torch.zeros(msgs.n, self.dim, dtype=torch.float64)
        out[torch.arange(msgs.n), j] = sign * self.dim * self.radius / (2 * self.p - 1)
        return out
