"""SQKR — Subsampled and Quantized Kashin's Representation (Chen, Kairouz, Ozgur, NeurIPS 2020).

Kashin representation ``s`` (bound ``B``); sample ``k`` distinct coordinates uniformly
(independently of the data); quantize each to one bit, ``+B`` w.p. ``(1 + s_j/B)/2`` else
``-B``; send the ``k``-bit string through ``2^k``-ary randomized response (keep w.p.
``p = e^ε/(e^ε+2^k−1)``).  Per bit the output correlates with the input by ``p − q``; the
server decodes each sampled coordinate as ``(N/k) B bit/(p−q)`` and reconstructs
``x̂ = Qᵀ ŝ / √N``.  ``k = min(⌈ε log2 e⌉, b0)``.  Bits: ``k (⌈log2 N⌉ + 1)`` with private
coin (indices sent), ``k`` with public coin (indices derived from a public per-client
seed passed as ``coins`` to both ``encode`` and ``decode``).  Pure ε-LDP per message, at any
finite ε (``p, q`` are computed from ``e^{−ε}`` where ``e^ε`` would overflow).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import rng
from ..lazy import lazy_module
from ..privacy.events import flat_rr_probabilities
from .base import Field, Messages, Param, WireError, register_encoder
from .framed import FRAME_PARAMS, FramedEncoder
from .seeded import sampled_indices

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")


@register_encoder("sqkr")
class SQKR(FramedEncoder):
    width = "k"
    params: ClassVar[dict[str, Param]] = {
        **FRAME_PARAMS,
        "k": Param(int, 0, "sampled coordinates (0: min(ceil(eps log2 e), b0))", low=0, high=16),
        "b0": Param(int, 4, "bit budget cap for the automatic k", low=1, high=16),
        "coin": Param(str, "private", "private coin sends indices; public coin derives them from coins", ("private", "public")),
    }
    unbiased = False  # not at a chosen level (Walsh flats need more); guarantee=unbiased instances are (framed.py)
    unbiased_unless_clipped = True
    bits_formula = "k * (ceil(log2(N)) + 1) if coin == 'private' else k"
    summary = "Kashin + k sampled coordinates, 1-bit quantized, 2^k-ary RR"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        bits = self.epsilon * math.log2(math.e)  # inf for ε near the float maximum: then k = b0
        k = self.cfg["k"] or (self.cfg["b0"] if bits >= self.cfg["b0"] else math.ceil(bits))
        if not 1 <= k <= min(16, self.N):
            raise ValueError(f"SQKR k must be in [1, 16], got {k}")
        self.k = k
        self.p, self.q = flat_rr_probabilities(self.epsilon, 2**k)  # overflow-free at any finite ε

    def bits_quantities(self) -> dict[str, Any]:
        return {**super().bits_quantities(), "k": self.k}

    def layout(self) -> list[Field]:
        out = [Field("bits", self.k, 1)]
        if self.cfg["coin"] == "private":
            out.insert(0, Field("idx", self.log2n, self.k, limit=self.N))
        return out

    def _indices(self, seeds: np.ndarray | None, coins: Any, n: int) -> torch.Tensor:
        return torch.from_numpy(sampled_indices(self, seeds, coins, n, self.k, self.N))

    def _encode(self, x: torch.Tensor, seeds: np.ndarray, coins: Any, fixed: bool = False) -> Messages:
        idx = self._indices(seeds, coins, x.shape[0]).to(self.device)
        s, stats = self.coefficients(x, idx, fixed)
        u = torch.from_numpy(rng.uniform(seeds, "sqkr-bits", self.k + 2)).to(self.device)
        bits = (u[:, : self.k] < (1 + s / self.bound) / 2).long()
        word = (bits << torch.arange(self.k, device=self.device)).sum(1)
        other = torch.minimum((u[:, self.k + 1] * (2**self.k - 1)).long(), torch.tensor(2**self.k - 2))
        other = other + (other >= word).long()
        out = torch.where(u[:, self.k] < self.p, word, other)
        fields = {"bits": out[:, None]}
        if self.cfg["coin"] == "private":
            fields["idx"] = idx
        return Messages(fields, stats)

    def _values(self, msgs: Messages, coins: Any) -> tuple[torch.Tensor, torch.Tensor]:
        n = msgs.n
        idx = msgs.fields["idx"] if "idx" in msgs.fields else self._indices(None, coins, n)
        word = msgs.fields["bits"][:, 0].to(self.device)
        bits = (word[:, None] >> torch.arange(self.k, device=self.device)) & 1
        val = (2.0 * bits.double() - 1.0) * (self.N / self.k) * self.bound / (self.p - self.q)
        return idx.to(self.device), val

    def decode(self, msgs: Messages, coins: Any = None) -> torch.Tensor:
        idx, val = self._values(msgs, coins)
        s = torch.zeros(msgs.n, self.N, dtype=torch.float64, device=self.device)
        s.scatter_(1, idx, val)
        return self.frame.synth_(s)

    def _contribution(self, msgs: Messages, coins: Any) -> torch.Tensor:
        idx, val = self._values(msgs, coins)
        return self._scatter(idx, val)

    def check(self, msgs: Messages) -> None:
        if "idx" in msgs.fields:
            srt = msgs.fields["idx"].sort(1).values
            if bool((srt[:, 1:] == srt[:, :-1]).any()):
                raise WireError("sqkr message repeats a sampled index (indices must be distinct)")

    def label_channel(self) -> torch.Tensor:
        m = 2**self.k
        return torch.full((m, m), self.q, dtype=torch.float64).fill_diagonal_(self.p)
