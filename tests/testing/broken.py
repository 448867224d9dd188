"""Encoders for the kit's own tests: one honest reference and deliberately broken variants of it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from sstq_fl import rng
from sstq_fl.encoders import Encoder, Field, Messages


class HonestRR(Encoder):
    """One uniform coordinate ``J``, one randomized-response bit (Warner, JASA 1965): unbiased, pure ε-LDP."""

    unbiased = True
    bits_formula = "ceil(log2(d)) + 1"
    summary = "reference: one coordinate, one bit, binary RR"
    factor = 1.0  # the ε the channel runs at, in units of the declared ε

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.p = 1.0 / (1.0 + math.exp(-self.epsilon))
        self.p_used = 1.0 / (1.0 + math.exp(-self.factor * self.epsilon))

    def layout(self) -> list[Field]:
        return [Field("j", max(1, math.ceil(math.log2(self.dim))), 1, limit=self.dim), Field("z", 1, 1)]

    def _uniforms(self, seeds: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.from_numpy(rng.randint(seeds, "rr-j", 1, self.dim)),
                torch.from_numpy(rng.uniform(seeds, "rr", 2)))

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any) -> Messages:
        j, u = self._uniforms(seeds)
        b = (u[:, 0] < (1 + x.double().gather(1, j)[:, 0] / self.radius) / 2).long()
        z = torch.where(u[:, 1] < self.p_used, b, 1 - b)
        return Messages({"j": j, "z": z[:, None]})

    def gain(self) -> float:
        return self.dim * self.radius / (2 * self.p_used - 1)

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        j = msgs.fields["j"][:, 0].long()
        out = torch.zeros(msgs.n, self.dim, dtype=torch.float64)
        out[torch.arange(msgs.n), j] = (2.0 * msgs.fields["z"][:, 0].double() - 1.0) * self.gain()
        return out

    def mse(self, x: torch.Tensor) -> torch.Tensor:
        return self.gain() ** 2 - (self.preprocess(x).double() ** 2).sum(1)


class HonestRRWithLaw(HonestRR):
    """The reference with its exact output law published (the kit's exact ε path)."""

    def output_law(self, x: torch.Tensor) -> tuple[Messages, torch.Tensor]:
        one = (1 + self.preprocess(x).double() / self.radius) / 2
        pz1 = self.p * one + (1 - self.p) * (1 - one)  # the declared channel, at ε
        probs = torch.stack([1 - pz1, pz1], dim=2).reshape(one.shape[0], -1) / self.dim
        return Messages({"j": torch.arange(self.dim).repeat_interleave(2)[:, None],
                         "z": torch.arange(2).repeat(self.dim)[:, None]}), probs


class WrongBits(HonestRR):
    """Declares one bit fewer than it sends (the sign bit forgotten in the formula)."""

    bits_formula = "ceil(log2(d))"


class FourEpsilon(HonestRR):
    """Runs its channel at 4ε while declaring ε (no output law: the kit audits)."""

    factor = 4.0


class FourEpsilonLyingLaw(HonestRRWithLaw):
    """Runs at 4ε but publishes the ε channel's law (the kit's fit test catches the lie)."""

    factor = 4.0


class Biased(HonestRR):
    """Forgets the randomized-response debiasing ``1/(2p − 1)`` yet declares itself unbiased."""

    def gain(self) -> float:
        return self.dim * self.radius


class BatchDependent(HonestRR):
    """Derives each row's randomness from its seed plus its position in the batch."""

    def _uniforms(self, seeds: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        shifted = seeds + np.arange(seeds.shape[0], dtype=np.uint64)[:, None] if seeds.ndim == 2 else \
            seeds + np.arange(seeds.shape[0], dtype=np.uint64)
        return super()._uniforms(shifted)


class MalformedAccepted(HonestRR):
    """Leaves out ``limit=d``: indices ``d..2^bits−1`` pass the wire format and crash ``decode``."""

    def layout(self) -> list[Field]:
        return [Field("j", max(1, math.ceil(math.log2(self.dim))), 1), Field("z", 1, 1)]
