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
- :class:`HadamardStackFrame` — ``L = 2`` or ``3`` randomized Hadamard stages with public random
  permutations between them, ``Q = M[:, S]``, ``M = (H D_L/√N) P_{L−1} ⋯ P_1 (H D_1/√N)``; still
  ``O(L N log N)`` per product.  It breaks the Walsh structure of the column set (no affine subspace
  of Walsh indices spans part of its range), the mechanism behind the one-stage frame's large worst
  level; no dimension-free guarantee is proved for it either (measured in ``benchmarks/results/frame_stack/frame_stack.md``).
- :class:`HDStackFrame`, :class:`HD3StackFrame` — the same stages without the permutations (``hd2``, ``hd3``),
  the structured orthogonal matrices ``H D_3 H D_2 H D_1`` of Yu et al., "Orthogonal Random Features",
  NeurIPS 2016, §4, restricted to ``d`` columns.  A permutation is a gather that costs about three FWHTs
  on the CPU; without it three stages match the permuted frames' measured worst levels, two do not at
  ``d = 100``.
- :class:`HaarFrame` — a dense Haar-random ``N × d`` matrix with orthonormal columns, for
  small ``d``; its Kashin level is provably dimension-free (Lyubarskii & Vershynin, "Uncertainty
  principles and vector quantization", IEEE Trans. Inf. Theory 56(7), 2010: random orthogonal
  frames satisfy their uncertainty principle with high probability).

The randomized partial Hadamard frame is the default for its ``O(N log N)`` products; unlike the
Haar frame it carries no dimension-free guarantee (see :mod:`sstq_fl.bench.kashin`).
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ... import rng
from ...checks import check_array
from ...lazy import lazy_module
from .fwht import fwht_

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

DEFAULT_RHO = 2.5
CHUNK_BYTES = 1 << 24
"""Bytes of one ``[rows, N]`` buffer of a chunk of Kashin rows on a Hadamard frame (:meth:`Frame.row_chunk`):
32 float64 rows at N = 65,536.  The work is ``O(rows · N log N)`` whatever the chunk; the chunk trades the fixed
cost of each FWHT call and elementwise pass (smaller chunks pay it more often) against the working set's fit in
the CPU cache (larger ones spill out of it).  Chosen with ``sstq-fl bench round-cost`` (its Kashin stage,
1,000 clients at d = 25,450, over chunk sizes from 2 to 64 MiB; ``benchmarks/results/round_cost.json`` is the
run at this size)."""
GPU_CHUNK_BYTES = 1 << 30
"""The same for a frame on a GPU, where there is no cache to fit and every chunk costs a fixed launch and
synchronisation latency: the fewer chunks the better, within device memory.  1 GiB keeps the workspaces of a
10,000-client cohort at d = 25,450 (2.6 GB a buffer) within a few GiB while it runs in three chunks (chunked
against one batch: ``benchmarks/results/gpu_encode/kashin_profile_h200.log``)."""


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

    def certified_level(self) -> float:
        """A level that no input needs more than, proven for this frame: ``√N max_j ‖Q_j‖``.

        The minimum-norm representation ``s = √N Q x`` has ``|s_j| = √N |⟨Q_j, x⟩| ≤ √N ‖Q_j‖ ‖x‖``
        (Cauchy–Schwarz), so the worst level ``K* = sup_x min{‖s‖_∞ : Qᵀ s = √N x/‖x‖}`` is at most this.
        Since ``Σ_j ‖Q_j‖² = d``, it is at least ``√d``, and it equals ``√d`` on a one-stage Hadamard frame.
        No efficient certificate is known to do better at these sizes: bounding ``K* = √N / min_{‖y‖=1} ‖Q y‖_1``
        from above is a certification problem of the restricted-isometry kind (Bandeira, Dobriban, Mixon and Sawin,
        "Certifying the restricted isometry property is hard", IEEE Trans. Inf. Theory 59(6), 2013), and the
        coherence and Gershgorin bounds stall at the same ``√d``."""
        return math.sqrt(self.N) * self.max_row_norm()

    def row_chunk(self, dtype: torch.dtype) -> int | None:
        """Rows the Kashin iterations take at a time (``None``: all rows at once).  Every operation of a
        structured frame is row-wise, so chunking changes only where the working set lives (in cache)."""
        return None

    def gram_(self, e: torch.Tensor, wr: torch.Tensor) -> torch.Tensor:
        """In place, ``e ← Q Qᵀ e`` (``[n, N]``; the projection onto the frame's range); ``wr``
        (``[≥ n, d]``) is a workspace."""
        return self.coef(self.synth_(e, wr[: e.shape[0]]), e)

    def target(self, u: torch.Tensor) -> torch.Tensor:
        """The data of the affine set ``{s : Qᵀ s = √N u}`` in the form :meth:`affine_` takes (here ``u`` itself)."""
        return u

    def affine_(self, w: torch.Tensor, target: torch.Tensor, ws: torch.Tensor, wr: torch.Tensor) -> torch.Tensor:
        """In place, the projection of ``w`` (``[n, N]``) onto ``{s : Qᵀ s = √N u}``, ``target`` =
        :meth:`target` of ``u``: ``w + √N Q (u − Qᵀ w/√N)`` (exact because ``QᵀQ = I``).  ``ws`` (``[≥ n, N]``)
        and ``wr`` (``[≥ n, d]``) are workspaces."""
        n = w.shape[0]
        r = self.synth_(ws[:n].copy_(w), wr[:n])
        torch.sub(target, r, out=r)
        return w.add_(self.coef(r, ws[:n]))

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
        self._masks: dict[tuple[torch.dtype, float], torch.Tensor] = {}

    def to(self, device: torch.device | str) -> HadamardFrame:
        if torch.device(device) == self.device:
            return self
        return HadamardFrame(self.d, self.N, self.seed, device)

    def coef(self, r: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is None:
            out = torch.empty(r.shape[0], self.N, dtype=r.dtype, device=r.device)
        return fwht_(self._scattered(r, out.zero_()))

    def synth_(self, s: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        s = s.contiguous()
        fwht_(s)
        return _signed_columns(s, self.cols, self.col_signs, self.N, out)

    def row_chunk(self, dtype: torch.dtype) -> int | None:
        """Rows whose ``[rows, N]`` buffer is :data:`CHUNK_BYTES` on the CPU, :data:`GPU_CHUNK_BYTES` on a GPU."""
        budget = CHUNK_BYTES if self.device.type == "cpu" else GPU_CHUNK_BYTES
        return max(1, budget // (self.N * torch.empty((), dtype=dtype).element_size()))

    def gram_(self, e: torch.Tensor, wr: torch.Tensor) -> torch.Tensor:
        """``Q Qᵀ e = H (1_S ⊙ H e) / N``: the column signs cancel, and selecting ``S`` then scattering it back
        is a product with ``1_S / N`` (exact: ``N`` is a power of two).  The same values as the generic
        synthesis-then-analysis, in two FWHTs and one pass."""
        fwht_(e)
        e.mul_(self._mask(e.dtype, 1.0 / self.N))
        return fwht_(e)

    def target(self, u: torch.Tensor) -> torch.Tensor:
        """``u`` signed and scattered to the columns ``S`` (``[n, N]``): ``√N Q u`` before its FWHT."""
        return self._scattered(u, torch.zeros(u.shape[0], self.N, dtype=u.dtype, device=u.device))

    def _scattered(self, r: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out[:, S] = r · D_S`` on a zeroed ``out`` (``scatter_``: faster than ``index_copy_`` along columns)."""
        return out.scatter_(1, self.cols.expand(r.shape[0], -1), r * self.col_signs.to(r.dtype))

    def affine_(self, w: torch.Tensor, target: torch.Tensor, ws: torch.Tensor, wr: torch.Tensor) -> torch.Tensor:
        """``w + H (target − 1_S ⊙ H w / N)``: the generic projection's values (signs are ±1 and ``N`` a power
        of two, so every product is exact and the one subtraction rounds as before), in two FWHTs and two passes."""
        t = fwht_(ws[: w.shape[0]].copy_(w))
        torch.addcmul(target, t, self._mask(w.dtype, -1.0 / self.N), out=t)
        return w.add_(fwht_(t))

    def _mask(self, dtype: torch.dtype, value: float) -> torch.Tensor:
        """``value · 1_S`` (``[N]``, cached per dtype and value)."""
        key = (dtype, value)
        if key not in self._masks:
            m = torch.zeros(self.N, dtype=dtype, device=self.device)
            self._masks[key] = m.index_fill_(0, self.cols, value)
        return self._masks[key]

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        # H[j, c] = (-1)^popcount(j & c); Q[j, k] = H[j, S_k] D_{S_k} / √N
        bits = torch.bitwise_and(idx.to(torch.int64).unsqueeze(-1), self.cols.to(idx.device))
        par = _parity(bits)
        sign = 1.0 - 2.0 * par.to(torch.float64)
        return sign * self._signs64.to(idx.device) / math.sqrt(self.N)

    def row_sq_norms(self) -> torch.Tensor:
        return torch.full((self.N,), self.d / self.N, dtype=torch.float64)


def _signed_columns(s: torch.Tensor, cols: torch.Tensor, col_signs: torch.Tensor, n_frame: int,
                    out: torch.Tensor | None) -> torch.Tensor:
    """The last step of a Hadamard synthesis: ``s[:, S] · D_S / N`` into ``out`` (``[n, d]``, made if ``None``)."""
    if out is None:
        out = torch.empty(s.shape[0], cols.numel(), dtype=s.dtype, device=s.device)
    torch.index_select(s, 1, cols, out=out)
    return out.mul_(col_signs.to(s.dtype) / n_frame)


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


class HadamardStackFrame(Frame):
    """Stacked randomized Hadamard frame ``Q = M[:, S]``, ``M = (H D_L/√N) P_{L−1} ⋯ P_1 (H D_1/√N)``.

    ``D_i`` random signs, ``P_i`` random permutations (``(P v)_i = v_{π(i)}``), ``S`` a random set of
    ``d`` columns, ``L = stages`` (2 for ``kind = "hadamard2"``, 3 for ``"hadamard3"``).  ``M`` is
    orthogonal, so ``Q`` has orthonormal columns; a product costs ``L`` FWHTs.  Rows no longer have
    equal norms: :meth:`row_sq_norms` is computed once per ``(stages, d, N, seed)`` (``d``
    transforms) and cached.
    """

    kind = "hadamard2"
    stages = 2
    permuted = True

    def __init__(self, d: int, n_frame: int, seed: int = 0, device: torch.device | str = "cpu"):
        super().__init__(d, n_frame, seed)
        if n_frame & (n_frame - 1):
            raise ValueError(f"a Hadamard frame needs N a power of two, got {n_frame}")
        signs, perms, cols = _stack_public(self.stages, self.permuted, d, n_frame, seed)
        self.device = torch.device(device)
        self._signs_np, self._perms_np, self._cols_np = signs, perms, cols
        self.cols = torch.from_numpy(cols).to(self.device)
        self.col_signs = torch.from_numpy(signs[0][cols]).to(self.device)
        inv_sqrt = 1.0 / math.sqrt(n_frame)
        # later stages' signs carry the 1/√N of the stage before them
        self.stage_signs = [torch.from_numpy(s.astype(np.float64) * inv_sqrt).to(self.device) for s in signs[1:]]
        self.perms = [torch.from_numpy(p).to(self.device) for p in perms]
        self.inv_perms = [torch.from_numpy(np.argsort(p)).to(self.device) for p in perms]

    def to(self, device: torch.device | str) -> HadamardStackFrame:
        if torch.device(device) == self.device:
            return self
        return type(self)(self.d, self.N, self.seed, device)

    def coef(self, r: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is None:
            out = torch.empty(r.shape[0], self.N, dtype=r.dtype, device=r.device)
        out.zero_()
        out.index_copy_(1, self.cols, r * self.col_signs.to(r.dtype))
        fwht_(out)
        tmp = _scratch(r.shape[0], self.N, r.dtype, r.device) if self.perms else None
        for i, sg in enumerate(self.stage_signs):
            if tmp is not None:
                torch.index_select(out, 1, self.perms[i], out=tmp)
                torch.mul(tmp, sg.to(r.dtype), out=out)
            else:
                out.mul_(sg.to(r.dtype))
            fwht_(out)
        return out

    def synth_(self, s: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        s = s.contiguous()
        fwht_(s)
        tmp = _scratch(s.shape[0], self.N, s.dtype, s.device) if self.perms else None
        for i in reversed(range(len(self.stage_signs))):
            s.mul_(self.stage_signs[i].to(s.dtype))
            if tmp is not None:
                torch.index_select(s, 1, self.inv_perms[i], out=tmp)
                s.copy_(tmp)
            fwht_(s)
        return _signed_columns(s, self.cols, self.col_signs, self.N, out)

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        """``Q[idx]`` exactly (float64): ``Q_j = Qᵀ e_j``, one synthesis per distinct index."""
        flat = idx.reshape(-1).to(torch.int64).cpu()
        uniq, inv = torch.unique(flat, return_inverse=True)
        res = torch.empty(uniq.numel(), self.d, dtype=torch.float64)
        frame = self.to("cpu")
        for a in range(0, uniq.numel(), _CHUNK_ELEMS // self.N or 1):
            j = uniq[a : a + (_CHUNK_ELEMS // self.N or 1)]
            e = torch.zeros(j.numel(), self.N, dtype=torch.float64)
            e[torch.arange(j.numel()), j] = math.sqrt(self.N)
            res[a : a + j.numel()] = frame.synth_(e)
        return res[inv].reshape(*idx.shape, self.d).to(idx.device)

    def row_sq_norms(self) -> torch.Tensor:
        return _stack_row_sq_norms(type(self), self.d, self.N, self.seed).clone()


class HadamardStack3Frame(HadamardStackFrame):
    """Three-stage :class:`HadamardStackFrame` (``kind = "hadamard3"``)."""

    kind = "hadamard3"
    stages = 3


class HDStackFrame(HadamardStackFrame):
    """:class:`HadamardStackFrame` without the permutations: ``M = (H D_2/√N)(H D_1/√N)`` (``kind = "hd2"``)."""

    kind = "hd2"
    permuted = False


class HD3StackFrame(HDStackFrame):
    """Three stages, no permutations: ``M = (H D_3/√N)(H D_2/√N)(H D_1/√N)`` (``kind = "hd3"``)."""

    kind = "hd3"
    stages = 3


_CHUNK_ELEMS = 1 << 21
"""Rows per chunk when transforming identities: ``[chunk, N]`` float64 blocks of 16 MiB."""
_SCRATCH = threading.local()


def _scratch(n: int, width: int, dtype: torch.dtype, dev: torch.device) -> torch.Tensor:
    """A per-thread ``[n, width]`` buffer (grown on demand) for the permutation steps."""
    cache: dict[tuple[object, ...], torch.Tensor] = _SCRATCH.__dict__.setdefault("c", {})
    key = (width, dtype, dev)
    have = cache.get(key)
    if have is None or have.shape[0] < n:
        if len(cache) > 4:
            cache.clear()
        have = cache[key] = torch.empty(n, width, dtype=dtype, device=dev)
    return have[:n]


@lru_cache(maxsize=16)
def _stack_public(stages: int, permuted: bool, d: int, n_frame: int,
                  seed: int) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    seeds = np.array([seed], dtype=np.uint64)
    tag = f"frame-stack{stages}" if permuted else f"frame-hd{stages}"
    signs = [np.where(rng.raw_bits(seeds, f"{tag}-signs{i}", n_frame)[0] >> np.uint64(63), -1.0, 1.0)
             for i in range(stages)]
    perms = [np.argsort(rng.raw_bits(seeds, f"{tag}-perm{i}", n_frame)[0], kind="stable").astype(np.int64)
             for i in range(stages - 1 if permuted else 0)]
    keys = rng.raw_bits(seeds, f"{tag}-columns", n_frame)[0]
    cols = np.sort(np.argsort(keys, kind="stable")[:d]).astype(np.int64)
    return [s.astype(np.float32) for s in signs], perms, cols


@lru_cache(maxsize=16)
def _stack_row_sq_norms(cls: type[HadamardStackFrame], d: int, n_frame: int, seed: int) -> torch.Tensor:
    """``‖Q_j‖² = Σ_k Q_{jk}²`` from the columns ``Q e_k`` (``d`` analyses, float64, in chunks)."""
    frame = cls(d, n_frame, seed)
    acc = torch.zeros(n_frame, dtype=torch.float64)
    step = max(1, _CHUNK_ELEMS // n_frame)
    for a in range(0, d, step):
        k = torch.arange(a, min(d, a + step))
        e = torch.zeros(k.numel(), d, dtype=torch.float64)
        e[torch.arange(k.numel()), k] = 1.0
        acc += (frame.coef(e) ** 2).sum(0)
    return acc / n_frame


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


FRAME_KINDS: dict[str, type[HadamardFrame] | type[HadamardStackFrame] | type[HaarFrame]] = {
    "hadamard": HadamardFrame, "hadamard2": HadamardStackFrame, "hadamard3": HadamardStack3Frame, "hd2": HDStackFrame,
    "hd3": HD3StackFrame, "haar": HaarFrame}


def make_frame(kind: str, d: int, rho: float = DEFAULT_RHO, seed: int = 0, device: torch.device | str = "cpu") -> Frame:
    """Build the public frame ``kind`` for dimension ``d`` with ``N = 2^⌈log2(ρ d)⌉``."""
    if kind not in FRAME_KINDS:
        raise ValueError(f"unknown frame kind {kind!r}; choose one of {sorted(FRAME_KINDS)}")
    return FRAME_KINDS[kind](d, frame_size(d, rho), seed, device)
