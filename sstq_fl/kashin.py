"""Kashin representations, batched over clients.

Given a frame ``Q`` (``N × d``, orthonormal columns) and ``x ∈ R^d``, a Kashin
representation is a vector ``a ∈ R^N`` with ``Qᵀ a = x`` exactly and all entries small:
``‖a‖_∞ ≤ K ‖x‖ / √N``.  ``K`` is the *Kashin level*; SSTQ's and SQKR's errors scale with
``K²``, so it is a quality lever.  Results are returned in scaled units ``s = √N · a``
(so ``‖s‖_∞ ≤ K ‖x‖``).

Two methods, a speed/level trade-off:

``lv`` — Lyubarskii & Vershynin (2010), "Uncertainty principles and vector quantization",
IEEE Trans. Inf. Theory 56(7), truncation algorithm (spec §1).  With ``u = x/‖x‖``,
``r_0 = u``::

    c_k = √N Q r_k ;  m_k = η^k / √δ ;  s += clip(c_k, ±m_k) ;  r_{k+1} = Qᵀ (c_k − clip(c_k)) / √N

until ``‖r_k‖ · max_j‖Q_j‖ √N ≤ fold_tol`` (or ``max_passes``); then ``s += √N Q r_k``
folds the residual in, so reconstruction is exact.  The partial sums never exceed
``Σ_k m_k < 1/((1−η)√δ)`` and the fold adds at most ``fold_tol``, so whenever the stop
criterion is met the **public bound** ``K = 1/((1−η)√δ) + fold_tol`` holds.  The
contraction ``‖r_{k+1}‖ ≤ η^{k+1}`` that the theory assumes is *checked* per row and
reported, not assumed.  Defaults ``η = 0.55, δ = 0.9`` give ``K = 2.352``; they were chosen
by measuring the worst case (inputs equal to frame rows, which saturate the bound) over a
grid (see ``sstq-fl bench kashin``).

``ap`` — alternating projections between the box ``{‖s‖_∞ ≤ L}`` and the affine set
``{Qᵀ a = u}``, started from ``lv``; each iteration costs two transforms, and the best exact
iterate is kept (so it is never worse than ``lv``).  It reaches lower levels on typical
inputs (``L ≈ 1.65–1.75`` for Gaussian and sparse inputs at ``ρ = 2.5``) but converges
slowly, does not reach them on inputs equal to frame rows, and its public bound is the
target ``L`` itself, enforced at encode time by clipping (counted, biased).

Each row is processed independently: rows that meet the stop criterion leave the batch, so
a client's representation never depends on which other clients share the batch.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import torch

from .frames import Frame


@dataclass(frozen=True)
class KashinConfig:
    """Public parameters of the Kashin computation (part of every encoder's identity)."""

    method: str = "lv"
    eta: float = 0.55
    delta: float = 0.9
    max_passes: int = 40
    fold_tol: float = 0.01
    ap_level: float = 1.75
    ap_iters: int = 300
    ap_tol: float = 1e-3

    def __post_init__(self) -> None:
        if self.method not in ("lv", "ap"):
            raise ValueError(f"kashin method must be 'lv' or 'ap', got {self.method!r}")
        if not 0.0 < self.eta < 1.0:
            raise ValueError(f"kashin eta must be in (0, 1), got {self.eta}")
        if not 0.0 < self.delta <= 1.0:
            raise ValueError(f"kashin delta must be in (0, 1], got {self.delta}")
        if self.max_passes < 1 or self.ap_iters < 0:
            raise ValueError("kashin max_passes must be >= 1 and ap_iters >= 0")
        if not self.fold_tol > 0 or not self.ap_level > 1.0:
            raise ValueError("kashin fold_tol must be > 0 and ap_level > 1")

    @property
    def level(self) -> float:
        """The public Kashin level ``K``: ``|s_j| ≤ K ‖x‖`` for every input (see module doc)."""
        if self.method == "ap":
            return self.ap_level * (1.0 + self.ap_tol)
        return 1.0 / ((1.0 - self.eta) * math.sqrt(self.delta)) + self.fold_tol


@dataclass
class KashinResult:
    """Scaled coefficients ``s = √N a`` (``[n, N]``, or ``[n, k]`` at requested indices)."""

    coeffs: torch.Tensor
    passes: torch.Tensor  # [n] passes (lv) + iterations (ap) used per row
    residual: torch.Tensor  # [n] final ‖r‖ / ‖x‖ before the fold
    contraction_failures: torch.Tensor  # [n] passes where ‖r_{k+1}‖ > η^{k+1}
    converged: torch.Tensor  # [n] the stop criterion was met (bound guaranteed)


def kashin(frame: Frame, x: torch.Tensor, cfg: KashinConfig, idx: torch.Tensor | None = None) -> KashinResult:
    """Kashin representation of each row of ``x`` (``[n, d]``).

    With ``idx`` (``[n, k]`` integer), only the coefficients at those positions are
    accumulated and returned (``[n, k]``): all an SSTQ or SQKR message needs, at a fraction
    of the memory traffic.  ``method='ap'`` always computes the full representation.
    """
    if x.dim() != 2 or x.shape[1] != frame.d:
        raise ValueError(f"x must be [clients, {frame.d}], got {tuple(x.shape)}")
    if cfg.method == "ap":
        res = _lv(frame, x, cfg, None)
        res = _alternating_projections(frame, x, cfg, res)
        if idx is not None:
            res.coeffs = res.coeffs.gather(1, idx)
        return res
    return _lv(frame, x, cfg, idx)


def _lv(frame: Frame, x: torch.Tensor, cfg: KashinConfig, idx: torch.Tensor | None) -> KashinResult:
    n, dev = x.shape[0], x.device
    norms = torch.linalg.vector_norm(x, dim=1)
    width = frame.N if idx is None else idx.shape[1]
    out = torch.zeros(n, width, dtype=x.dtype, device=dev)
    passes = torch.zeros(n, dtype=torch.int64, device=dev)
    resid = torch.zeros(n, dtype=torch.float64, device=dev)
    fails = torch.zeros(n, dtype=torch.int64, device=dev)
    conv = torch.ones(n, dtype=torch.bool, device=dev)
    rows = torch.nonzero(norms > 0).flatten()
    r = x[rows] / norms[rows, None]
    fold_scale = frame.max_row_norm() * math.sqrt(frame.N)
    done = torch.zeros(rows.numel(), dtype=torch.bool, device=dev)
    # two [n, N] workspaces and one [n, d], reused by every pass (fresh large
    # allocations page-fault and cost more than the transforms themselves)
    ws_c, ws_e, ws_r = _workspace(rows.numel(), frame.N, frame.d, x.dtype, dev)
    k = 0
    while rows.numel():
        c = frame.coef(r, ws_c[: rows.numel()])
        fold = done | (k >= cfg.max_passes)
        if bool(fold.any()):
            _add(out, rows[fold], c[fold], idx, None)
            conv[rows[fold]] = done[fold]
            keep = ~fold
            rows = rows[keep]
            if not rows.numel():
                break
            c = ws_c[: rows.numel()].copy_(c[keep])
        m = cfg.eta**k / math.sqrt(cfg.delta)
        _add(out, rows, c, idx, m)
        e = torch._C._nn.softshrink(c, m, out=ws_e[: rows.numel()])  # type: ignore[call-arg]
        r = frame.synth_(e, ws_r[: rows.numel()])
        rn = torch.linalg.vector_norm(r, dim=1).double()
        fails[rows] += (rn > cfg.eta ** (k + 1) * (1 + 1e-6)).long()
        passes[rows] = k + 1
        resid[rows] = rn
        zero = rn == 0
        if bool(zero.any()):  # nothing left to fold in: retire now
            rows, rn = rows[~zero], rn[~zero]
            r = ws_r[: rows.numel()].copy_(r[~zero])
        done = rn * fold_scale <= cfg.fold_tol
        k += 1
    out.mul_(norms[:, None])
    return KashinResult(out, passes, resid, fails, conv)


_WS = threading.local()


def _workspace(n: int, big: int, small: int, dtype: torch.dtype, dev: torch.device) -> tuple[torch.Tensor, ...]:
    """Per-thread reusable buffers ``[n, N], [n, N], [n, d]`` (grown on demand, kept warm)."""
    cache: dict[tuple[object, ...], tuple[torch.Tensor, ...]] = _WS.__dict__.setdefault("c", {})
    key = (big, small, dtype, dev)
    have = cache.get(key)
    if have is None or have[0].shape[0] < n:
        if len(cache) > 4:
            cache.clear()
        have = (
            torch.empty(n, big, dtype=dtype, device=dev),
            torch.empty(n, big, dtype=dtype, device=dev),
            torch.empty(n, small, dtype=dtype, device=dev),
        )
        cache[key] = have
    return have


def _add(out: torch.Tensor, rows: torch.Tensor, c: torch.Tensor, idx: torch.Tensor | None, m: float | None) -> None:
    """``out[rows] += clip(c, ±m)`` (no clipping when ``m`` is None), at ``idx`` if given."""
    if idx is not None:
        c = c.gather(1, idx[rows])
    if m is not None:
        c = c.clamp(-m, m)
    if rows.numel() == out.shape[0]:
        out.add_(c)  # rows is the full, sorted range: no scatter needed
    else:
        out.index_add_(0, rows, c)


def _alternating_projections(frame: Frame, x: torch.Tensor, cfg: KashinConfig, start: KashinResult) -> KashinResult:
    """Alternate ``s ← clip(s, ±L)`` and ``s ← s + √N Q (u − Qᵀ s/√N)`` row by row."""
    norms = torch.linalg.vector_norm(x, dim=1)
    s = start.coeffs
    rows = torch.nonzero(norms > 0).flatten()
    s.div_(torch.where(norms > 0, norms, 1.0)[:, None])
    lim = cfg.ap_level
    stop = lim * (1.0 + cfg.ap_tol)
    conv = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    conv[norms == 0] = True
    passes = start.passes.clone()
    best, best_lvl = s.clone(), s.abs().amax(dim=1)  # every iterate below reconstructs x exactly
    for it in range(cfg.ap_iters + 1):
        sub = s[rows]
        lvl = sub.abs().amax(dim=1)
        better = lvl < best_lvl[rows]
        best[rows[better]], best_lvl[rows[better]] = sub[better], lvl[better]
        ok = lvl <= stop
        conv[rows[ok]] = True
        rows, sub = rows[~ok], sub[~ok]
        if not rows.numel() or it == cfg.ap_iters:
            break
        u = x[rows] / norms[rows, None]
        sub.clamp_(-lim, lim)
        sub.add_(frame.coef(u - frame.synth_(sub.clone())))
        s[rows] = sub
        passes[rows] += 1
    best.mul_(norms[:, None])
    return KashinResult(best, passes, start.residual, start.contraction_failures, conv)


def achieved_level(frame: Frame, x: torch.Tensor, cfg: KashinConfig) -> torch.Tensor:
    """Measured level ``max_j |s_j| / ‖x‖`` per row (the quantity the public bound must cover)."""
    res = kashin(frame, x, cfg)
    norms = torch.linalg.vector_norm(x, dim=1).clamp_min(1e-300)
    return res.coeffs.abs().amax(dim=1).double() / norms.double()


def adversarial_inputs(frame: Frame, n_each: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    """Hard inputs for measuring a level: frame rows, sparse vectors, and Gaussian vectors."""
    import numpy as np

    from . import rng  # local: keeps module import light

    seeds = np.arange(seed, seed + n_each, dtype=np.uint64)
    j = torch.from_numpy(rng.randint(seeds, "adv-rows", 1, frame.N)[:, 0])
    rows = frame.rows(j)
    sparse = torch.zeros(n_each, frame.d, dtype=torch.float64)
    for i in range(n_each):
        pos = torch.from_numpy(rng.sample_without_replacement(seeds[i : i + 1], "adv-sparse", 1 + i, frame.d)[0])
        sparse[i, pos] = 1.0
    gauss = torch.from_numpy(rng.normal(seeds, "adv-gauss", frame.d))
    return {"frame_row": rows, "sparse": sparse, "gaussian": gauss}
