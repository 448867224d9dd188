"""Tight frames for Kashin representations.

A frame is an ``N × d`` matrix ``Q`` with orthonormal columns (``Qᵀ Q = I_d``, ``N > d``);
the scaled Parseval frame is ``U = √(N/d) Q`` (``Uᵀ U = (N/d) I_d``).  Frames are *public*: they are rebuilt
bit-for-bit from ``(kind, d, N, seed)`` on every client and on the server, and nothing
about them is ever sent.

Internally coefficients are kept in *scaled units* ``s = √N · a`` (``a`` the coefficients
of ``x = Qᵀ a``), so that a Kashin level ``K`` reads ``‖s‖_∞ ≤ K ‖x‖`` and the
partial-Hadamard transform needs no normalisation pass over ``N``-length rows.

- :class:`HadamardFrame` — randomized partial Hadamard, ``Q = (H_N D)[:, S] / √N``
  (``D`` random signs, ``S`` a random set of ``d`` columns); ``O(N log N)`` per product.
- :class:`HaarFrame` — a dense Haar-random ``N × d`` matrix with orthonormal columns, for
  small ``d``; its Kashin level is provably dimension-free (Lyubarskii & Vershynin, "Uncertainty
  principles and vector quantization", IEEE Trans. Inf. Theory 56(7), 2010: random orthogonal
  frames satisfy their uncertainty principle with high probability).

The randomized partial Hadamard frame is the default for its ``O(N log N)`` products; unlike the
Haar frame it carries no dimension-free guarantee (see :mod:`sstq_fl.bench.kashin`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from functools import lru_cache

import numpy as np
import torch

from ... import rng
from ...checks import check_array
from .fwht import fwht_

DEFAULT_RHO = 2.5


def frame_size(d: int, rho: float = DEFAULT_RHO) -> int:
    """``N = 2^⌈log2(ρ d)⌉``: redundancy at least ``ρ``, rounded up to a power of two for the FWHT (our
    rule; ``ρ = 2.5`` by default, as in the SSTQ experiments)."""
    if d < 1:
        raise ValueError(f"dimension d must be >= 1, got {d}")
    if not 1.0 < rho < math.inf:
        raise ValueError(f"frame redundancy rho must be a finite number > 1, got {rho}")
    log2n = max(1, math.ceil(math.log2(rho * d)))
    check_array(f"a frame of N = 2^{log2n} rows (d = {d}, rho = {rho:g})", 1 << min(log2n, 80))
    return 1 << log2n


class Frame(ABC):
    """A public tight frame; all methods are batched over rows ``[n, ·]``."""

    kind: str

    def __init__(self, d: int, n_frame: int, seed: int):
        if n_frame <= d:
            raise ValueError(f"a frame needs N > d for a Kashin guarantee, got N={n_frame}, d={d}")
        self.d, self.N, self.seed = d, n_frame, seed

    @abstractmethod
    def coef(self, r: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Scaled analysis ``√N · Q r`` of rows ``r`` ``[n, d]`` → ``[n, N]``.

        ``out`` (contiguous ``[n, N]``) is an optional workspace that receives the result.
        """

    @abstractmethod
    def synth_(self, s: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Synthesis ``Qᵀ (s / √N)`` of scaled coefficients ``[n, N]`` → ``[n, d]``.

        May overwrite ``s``; ``out`` (``[n, d]``) optionally receives the result.
        """

    @abstractmethod
    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        """Rows ``Q[idx]`` of the orthonormal ``Q``, shape ``idx.shape + (d,)``."""

    @abstractmethod
    def row_sq_norms(self) -> torch.Tensor:
        """``‖Q_j‖²`` for every row ``j`` (float64, length ``N``)."""

    def max_row_norm(self) -> float:
        return float(self.row_sq_norms().max().sqrt())

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind, "d": self.d, "N": self.N, "seed": self.seed}

    def to(self, device: torch.device | str) -> Frame:
        return self


class HadamardFrame(Frame):
    """Randomized partial Hadamard frame ``Q = (H_N D)[:, S] / √N``; rows have ``‖Q_j‖² = d/N``."""

    kind = "hadamard"

    def __init__(self, d: int, n_frame: int, seed: int = 0, device: torch.device | str = "cpu"):
        super().__init__(d, n_frame, seed)
        if n_frame & (n_frame - 1):
            raise ValueError(f"a Hadamard frame needs N a power of two, got {n_frame}")
        signs, cols = _hadamard_public(d, n_frame, seed)
        self.device = torch.device(device)
        self.cols = torch.from_numpy(cols).to(self.device)
        self.col_signs = torch.from_numpy(signs[cols]).to(self.device)
        self._signs64 = torch.from_numpy(signs[cols].astype(np.float64))
        self._cols_np = cols

    def to(self, device: torch.device | str) -> HadamardFrame:
        if torch.device(device) == self.device:
            return self
        return HadamardFrame(self.d, self.N, self.seed, device)

    def coef(self, r: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is None:
            out = torch.empty(r.shape[0], self.N, dtype=r.dtype, device=r.device)
        out.zero_()
        out.index_copy_(1, self.cols, r * self.col_signs.to(r.dtype))
        return fwht_(out)

    def synth_(self, s: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        s = s.contiguous()
        fwht_(s)
        if out is None:
            out = torch.empty(s.shape[0], self.d, dtype=s.dtype, device=s.device)
        torch.index_select(s, 1, self.cols, out=out)
        return out.mul_(self.col_signs.to(s.dtype) / self.N)

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        # H[j, c] = (-1)^popcount(j & c); Q[j, k] = H[j, S_k] D_{S_k} / √N
        bits = torch.bitwise_and(idx.to(torch.int64).unsqueeze(-1), self.cols.to(idx.device))
        par = _parity(bits)
        sign = 1.0 - 2.0 * par.to(torch.float64)
        return sign * self._signs64.to(idx.device) / math.sqrt(self.N)

    def row_sq_norms(self) -> torch.Tensor:
        return torch.full((self.N,), self.d / self.N, dtype=torch.float64)


def _parity(v: torch.Tensor) -> torch.Tensor:
    """Parity of the popcount of non-negative int64 values."""
    v = v ^ (v >> 32)
    v = v ^ (v >> 16)
    v = v ^ (v >> 8)
    v = v ^ (v >> 4)
    v = v ^ (v >> 2)
    v = v ^ (v >> 1)
    return v & 1


@lru_cache(maxsize=16)
def _hadamard_public(d: int, n_frame: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    seeds = np.array([seed], dtype=np.uint64)
    signs = np.where(rng.raw_bits(seeds, "frame-signs", n_frame)[0] >> np.uint64(63), -1.0, 1.0)
    keys = rng.raw_bits(seeds, "frame-columns", n_frame)[0]
    cols = np.sort(np.argsort(keys, kind="stable")[:d]).astype(np.int64)
    return signs.astype(np.float32), cols


class HaarFrame(Frame):
    """Dense Haar-random frame: ``Q`` = the ``Q`` factor of an ``N × d`` Gaussian matrix."""

    kind = "haar"

    def __init__(self, d: int, n_frame: int, seed: int = 0, device: torch.device | str = "cpu"):
        super().__init__(d, n_frame, seed)
        if n_frame * d > 64_000_000:
            raise ValueError(f"a dense Haar frame of {n_frame}x{d} is too large; use kind='hadamard'")
        g = rng.normal(np.array([seed], dtype=np.uint64), "haar-frame", n_frame * d)[0]
        q, r = np.linalg.qr(g.reshape(n_frame, d))
        q = q * np.sign(np.diag(r))[None, :]  # Haar: fix the signs of the QR factor
        self.device = torch.device(device)
        self.q64 = torch.from_numpy(q)
        self.q = self.q64.to(device)

    def to(self, device: torch.device | str) -> HaarFrame:
        out = object.__new__(HaarFrame)
        out.__dict__.update(self.__dict__)
        out.device = torch.device(device)
        out.q = self.q64.to(device)
        return out

    def coef(self, r: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        res = (r @ self.q.to(r.dtype).T) * math.sqrt(self.N)
        return res if out is None else out.copy_(res)

    def synth_(self, s: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        res = (s @ self.q.to(s.dtype)) / math.sqrt(self.N)
        return res if out is None else out.copy_(res)

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        return self.q64.to(idx.device)[idx]

    def row_sq_norms(self) -> torch.Tensor:
        return (self.q64**2).sum(1)


FRAME_KINDS = {"hadamard": HadamardFrame, "haar": HaarFrame}


def make_frame(kind: str, d: int, rho: float = DEFAULT_RHO, seed: int = 0, device: torch.device | str = "cpu") -> Frame:
    """Build the public frame ``kind`` for dimension ``d`` with ``N = 2^⌈log2(ρ d)⌉``."""
    if kind not in FRAME_KINDS:
        raise ValueError(f"unknown frame kind {kind!r}; choose one of {sorted(FRAME_KINDS)}")
    return FRAME_KINDS[kind](d, frame_size(d, rho), seed, device)
