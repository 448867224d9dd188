"""Template plug-in: one uniformly sampled coordinate, one bit, binary randomized response.

Client (input ``x`` clipped to the ball of radius ``R``): draw ``J ~ Uniform{0..d−1}`` independently of
``x``; set ``B = 1`` w.p. ``(1 + x_J/R)/2``, else ``0``; send ``(J, Z)`` where ``Z = B`` w.p.
``p = e^ε/(1+e^ε)`` and ``Z = 1 − B`` otherwise (Warner's randomized response, JASA 60(309), 1965).
Server: ``x̂ = d R (2Z − 1) e_J / (2p − 1)``, unbiased since ``E[2Z − 1 | J] = (2p − 1) x_J/R``.

Privacy: ``P(J = j, Z = z | x) = (1/d) (p P(B = z) + (1 − p) P(B ≠ z))`` lies in ``[(1−p)/d, p/d]``, so the
ratio for any two inputs is at most ``p/(1−p) = e^ε``: pure ε-LDP per message (replace-one).
Bits: ``⌈log2 d⌉ + 1``.  MSE: every ``x̂`` has norm ``d R/(2p−1)``, so ``E‖x̂ − x‖² = d² R²/(2p−1)² − ‖x‖²``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from sstq_fl import rng
from sstq_fl.encoders import Encoder, Field, Messages


class TemplateRR(Encoder):
    unbiased = True
    bits_formula = "ceil(log2(d)) + 1"
    summary = "template plug-in: one coordinate, one bit, binary randomized response"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.p = 1.0 / (1.0 + math.exp(-self.epsilon))

    def layout(self) -> list[Field]:
        return [Field("j", max(1, math.ceil(math.log2(self.dim))), 1, limit=self.dim), Field("z", 1, 1)]

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        j = torch.from_numpy(rng.randint(seeds, "template-rr-j", 1, self.dim))
        u = torch.from_numpy(rng.uniform(seeds, "template-rr", 2))
        b = (u[:, 0] < (1 + x.double().cpu().gather(1, j)[:, 0] / self.radius) / 2).long()
        z = torch.where(u[:, 1] < self.p, b, 1 - b)
        return Messages({"j": j.to(self.device), "z": z[:, None].to(self.device)})

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        j = msgs.fields["j"][:, 0].cpu()
        sign = 2.0 * msgs.fields["z"][:, 0].cpu().double() - 1.0
        out = torch.zeros(msgs.n, self.dim, dtype=torch.float64)
        out[torch.arange(msgs.n), j] = sign * self.dim * self.radius / (2 * self.p - 1)
        return out.to(self.device)

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        xc = self.preprocess(x).double()
        return (self.dim * self.radius / (2 * self.p - 1)) ** 2 - (xc**2).sum(1)

    def output_law(self, x: torch.Tensor) -> tuple[Messages, torch.Tensor]:
        """Every message ``(j, z)`` and its exact probability for each input row (used by the kit's exact ε check)."""
        xc = self.preprocess(x).double().cpu()
        one = (1 + xc / self.radius) / 2  # P(B = 1) for each coordinate
        pz1 = self.p * one + (1 - self.p) * (1 - one)
        probs = torch.stack([1 - pz1, pz1], dim=2).reshape(xc.shape[0], -1) / self.dim
        j = torch.arange(self.dim).repeat_interleave(2)
        z = torch.arange(2).repeat(self.dim)
        return Messages({"j": j[:, None], "z": z[:, None]}), probs
