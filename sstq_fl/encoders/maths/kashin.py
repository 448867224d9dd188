"""Kashin representations, batched over clients.

Given a frame ``Q`` (``N × d``, orthonormal columns) and ``x ∈ R^d``, a Kashin
representation is a vector ``a ∈ R^N`` with ``Qᵀ a = x`` exactly and all entries small:
``‖a‖_∞ ≤ K ‖x‖ / √N``.  ``K`` is the *Kashin level*; SSTQ's and SQKR's errors scale with
``K²``, so it is a quality lever.  Results are returned in scaled units ``s = √N · a``
(so ``‖s‖_∞ ≤ K ‖x‖``).

Three methods:

``linf`` (default; the method and its level are our own) — a level-targeted search
(:func:`_linf`): from the minimum-norm representation, three over-relaxed alternating
projections on a public schedule, then Douglas–Rachford splitting between the box ``{‖s‖_∞ ≤ 0.97 K}`` and the affine
set ``{Qᵀ s = √N u}``; every iterate is exact and a row retires as soon as ``‖s‖_∞ ≤ K``.  Public
level ``K = LINF_LEVEL = 1.9`` by default.  Evidence (``sstq-fl bench kashin-search``, ``benchmarks/results/kashin_search.json``;
Hadamard frame, ``ρ = 2.5``, seed 0; ℓ∞-minimal levels bracketed by :func:`linf_min`'s primal
iterate and dual certificate): Gaussian inputs ``1.38–1.45``, the E1 vector ``1.42/1.43``,
frame rows ``1.745`` at ``d = 100`` and ``1.820`` at ``d = 25,450`` (all rows of a Hadamard
frame need the same level: ``x ↦ x ⊙ w_j`` maps rows to rows and preserves every level).
``1.9`` is the largest of these, ``1.82``, plus a margin of 4%, which lets ``linf`` reach it in
2 transform pairs on typical inputs and ≈ 33 on frame rows.  **Not** a worst-case guarantee:
on a randomized partial Hadamard frame the worst level is much larger (``≥ 3.02`` at
``d = 100``, ``≥ √32 ≈ 5.66`` at ``d = 25,450``: inputs built from affine subspaces of Walsh
indices inside the frame's column set, see :mod:`sstq_fl.bench.kashin`), and on those inputs
*every* method clips at its public level, ``lv`` included; clipped coefficients are counted.

``lv`` — Lyubarskii & Vershynin (2010), "Uncertainty principles and vector quantization",
IEEE Trans. Inf. Theory 56(7), 2010: their truncation algorithm for frames with the uncertainty
principle, in the normalisation of this module.  With ``u = x/‖x‖``,
``r_0 = u``::

    c_k = √N Q r_k ;  m_k = η^k / √δ ;  s += clip(c_k, ±m_k) ;  r_{k+1} = Qᵀ (c_k − clip(c_k)) / √N

until ``‖r_k‖ · max_j‖Q_j‖ √N ≤ fold_tol`` (or ``max_passes``); then ``s += √N Q r_k``
folds the residual in, so reconstruction is exact.  The partial sums never exceed
``Σ_k m_k < 1/((1−η)√δ)`` and the fold adds at most ``fold_tol``, so whenever the stop
criterion is met the **public bound** ``K = 1/((1−η)√δ) + fold_tol`` holds.  The
contraction ``‖r_{k+1}‖ ≤ η^{k+1}`` that the theory assumes is *checked* per row and
reported, not assumed.  Defaults ``η = 0.55, δ = 0.9`` give ``K = 2.352``; we chose them
by measuring the worst case (inputs equal to frame rows, which saturate the bound) over a
grid (see ``sstq-fl bench kashin``).  The guarantee holds only when the run-time contraction
check passes; on the adversarial inputs above it fails (and the encoder clips, counted).

``ap`` — alternating projections between the box ``{‖s‖_∞ ≤ L}`` and the affine set
``{Qᵀ a = u}``, started from ``lv``; each iteration costs two transforms, and the best exact
iterate is kept (so it is never worse than ``lv``).  It reaches lower levels on typical
inputs (``L ≈ 1.65–1.75`` for Gaussian and sparse inputs at ``ρ = 2.5``) but converges
slowly, does not reach them on inputs equal to frame rows, and its public bound is the
target ``L`` itself, enforced at encode time by clipping (counted; declared biased below
``LINF_LEVEL``).  Below the frame rows' own level (1.82 at ``d = 25,450``) the box and the
affine set do not intersect for those inputs, which is why ``ap`` at 1.75 never improved on
``lv`` for frame rows there: the iteration converges to a pair of nearest points whose exact
member stays above ``lv``'s level.

:func:`linf_min` solves ``min ‖s‖_∞`` to a requested duality gap (Douglas–Rachford, with a dual
certificate): the measuring instrument behind these numbers, not an encode-time method.

Each row is processed independently: rows that meet the stop criterion leave the batch, so
a client's representation never depends on which other clients share the batch.

**Fixed schedule** (``kashin(..., fixed=True)``; the encoders use it for secure keys).  The adaptive
methods' time depends on the input: no iteration for the zero input, two transform pairs for a
Gaussian one, the whole cap for an input above the public level.  On the fixed schedule every row runs
the method's public cap (``linf``: the warm-up, ``linf_iters`` Douglas–Rachford iterations and the
``lv`` fallback; ``lv``: ``max_passes`` passes; ``ap``: both), a public function of ``(d, N)`` and the
parameters, with masks instead of early exits: a row keeps the value it had when it met its stop
criterion, and zero rows run on zeros.  Each method is one implementation with the schedule as a parameter
(:class:`~sstq_fl.encoders.maths.row_schedule.Rows`: rows leave the batch, or are masked).  The result
equals the adaptive one (bit for bit on the Hadamard frame, where every transform is row-wise; to float
rounding on the Haar frame, whose dense products depend on the batch shape); only the time changes, to
the adaptive worst case.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from ...lazy import lazy_module
from .frames import Frame
from .row_schedule import Rows, masked, unit_rows

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch")

METHODS = ("linf", "lv", "ap")

LINF_LEVEL = 1.9
"""Default public level of ``method='linf'`` (see the module doc for the evidence and margin)."""


@dataclass(frozen=True)
class KashinConfig:
    """Public parameters of the Kashin computation (part of every encoder's identity)."""

    method: str = "linf"
    eta: float = 0.55
    delta: float = 0.9
    max_passes: int = 40
    fold_tol: float = 0.01
    ap_level: float = 1.75
    ap_iters: int = 300
    ap_tol: float = 1e-3
    linf_level: float = LINF_LEVEL
    linf_iters: int = 300
    linf_warmup: str = "schedule"
    linf_fallback: bool = True
    """Whether a ``linf`` row that reaches ``linf_iters`` above the level gets ``lv``'s representation where
    that is lower (off in the short secure schedule: the fallback runs ``lv``'s whole pass cap on every row)."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"kashin method must be one of {METHODS}, got {self.method!r}")
        if self.linf_warmup not in WARMUPS:
            raise ValueError(f"kashin linf_warmup must be one of {WARMUPS}, got {self.linf_warmup!r}")
        if not 0.0 < self.eta < 1.0:
            raise ValueError(f"kashin eta must be in (0, 1), got {self.eta}")
        if not 0.0 < self.delta <= 1.0:
            raise ValueError(f"kashin delta must be in (0, 1], got {self.delta}")
        if self.max_passes < 1 or self.ap_iters < 0:
            raise ValueError("kashin max_passes must be >= 1 and ap_iters >= 0")
        if not self.fold_tol > 0 or not self.ap_level > 1.0 or not self.linf_level > 1.0:
            raise ValueError("kashin fold_tol must be > 0 and ap_level, linf_level > 1")
        if self.linf_iters < 0:
            raise ValueError("kashin linf_iters must be >= 0")

    @property
    def level(self) -> float:
        """The public Kashin level ``K``: ``|s_j| ≤ K ‖x‖`` is the bound the encoders enforce
        (by clipping, counted, where a row did not reach it; see module doc)."""
        if self.method == "ap":
            return self.ap_level * (1.0 + self.ap_tol)
        if self.method == "linf":
            return self.linf_level
        return 1.0 / ((1.0 - self.eta) * math.sqrt(self.delta)) + self.fold_tol

    @property
    def covers_natural_inputs(self) -> bool:
        """Whether the public level is at least what every natural input class was measured to need
        (frame rows: 1.82 at ``d = 25,450``; Gaussian and E1 vectors less): ``lv`` (2.352), or a level
        of at least :data:`LINF_LEVEL` (module doc).  ``ap``/``linf`` below it clip frame rows.  No
        configuration covers the adversarial Walsh-flat inputs of :mod:`sstq_fl.bench.kashin`
        (certified levels ``≥ 3.02`` at ``d = 100``, ``≥ 5.66`` at ``d = 25,450``): every method
        clips there (counted), which is why Kashin encoders declare ``unbiased_unless_clipped``; only a level at
        least the frame's proven :meth:`~sstq_fl.encoders.maths.frames.Frame.certified_level` (``guarantee=unbiased``)
        clips nothing."""
        if self.method == "lv":
            return True
        return self.level >= LINF_LEVEL * (1.0 - 1e-9)


def astuple_shallow(res: KashinResult) -> tuple[torch.Tensor, ...]:
    """A result's tensors in field order (``dataclasses.astuple`` would deep-copy them)."""
    return tuple(getattr(res, f.name) for f in fields(res))


@dataclass
class KashinResult:
    """Scaled coefficients ``s = √N a`` (``[n, N]``, or ``[n, k]`` at requested indices)."""

    coeffs: torch.Tensor
    passes: torch.Tensor  # [n] passes (lv) + iterations (ap) used per row
    residual: torch.Tensor  # [n] final ‖r‖ / ‖x‖ before the fold
    contraction_failures: torch.Tensor  # [n] passes where ‖r_{k+1}‖ > η^{k+1}
    converged: torch.Tensor  # [n] the stop criterion was met (bound guaranteed)


def kashin(frame: Frame, x: torch.Tensor, cfg: KashinConfig, idx: torch.Tensor | None = None,
           fixed: bool = False) -> KashinResult:
    """Kashin representation of each row of ``x`` (``[n, d]``).

    With ``idx`` (``[n, k]`` integer), only the coefficients at those positions are
    accumulated and returned (``[n, k]``): all an SSTQ or SQKR message needs, at a fraction
    of the memory traffic.  ``method='ap'`` always computes the full representation.
    ``fixed``: every row runs the method's public iteration cap, whatever its input, so the
    time does not depend on the input; the result is the adaptive one (rows that converge
    earlier keep their value; see :class:`~sstq_fl.encoders.maths.row_schedule.Rows`).
    """
    if x.dim() != 2 or x.shape[1] != frame.d:
        raise ValueError(f"x must be [clients, {frame.d}], got {tuple(x.shape)}")
    chunk = frame.row_chunk(x.dtype)
    if chunk is not None and x.shape[0] > chunk:
        parts = [kashin(frame, x[a:a + chunk], cfg, None if idx is None else idx[a:a + chunk], fixed)
                 for a in range(0, x.shape[0], chunk)]
        return KashinResult(*(torch.cat(f) for f in zip(*(astuple_shallow(r) for r in parts), strict=True)))
    if cfg.method == "linf":
        return _linf(frame, x, cfg, idx, fixed)
    if cfg.method == "ap":
        res = _alternating_projections(frame, x, cfg, fixed)
        if idx is not None:
            res.coeffs = res.coeffs.gather(1, idx)
        return res
    return _lv(frame, x, cfg, idx, fixed)


# ---------------------------------------------------------------- lv and ap
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


def _lv(frame: Frame, x: torch.Tensor, cfg: KashinConfig, idx: torch.Tensor | None,
        fixed: bool = False) -> KashinResult:
    """Lyubarskii & Vershynin's truncation passes (module doc); on the fixed schedule exactly ``max_passes``
    passes on every row, a row folding its residual in once, when its stop criterion is met."""
    n, dev = x.shape[0], x.device
    norms, u = unit_rows(x)
    rows = Rows(norms > 0, fixed)
    r = rows.take(u)
    out = torch.zeros(n, frame.N if idx is None else idx.shape[1], dtype=x.dtype, device=dev)
    passes, fails = torch.zeros(n, dtype=torch.int64, device=dev), torch.zeros(n, dtype=torch.int64, device=dev)
    resid, conv = torch.zeros(n, dtype=torch.float64, device=dev), torch.ones(n, dtype=torch.bool, device=dev)
    done = torch.zeros(rows.count, dtype=torch.bool, device=dev)
    fold_scale = frame.max_row_norm() * math.sqrt(frame.N)
    # two [n, N] workspaces and one [n, d], reused by every pass (fresh large
    # allocations page-fault and cost more than the transforms themselves)
    ws_c, ws_e, ws_r = _workspace(rows.count, frame.N, frame.d, x.dtype, dev)
    for k in range(cfg.max_passes + 1):
        if rows.empty:
            break
        c = frame.coef(r, ws_c[: rows.count])
        fold = rows.running(done | (k >= cfg.max_passes))
        out, conv, c = rows.retire(fold, out, c, idx, conv, done, c, add=True)
        if rows.empty or k == cfg.max_passes:
            break
        m = cfg.eta**k / math.sqrt(cfg.delta)
        out = rows.accumulate(out, c, idx, m)
        e = torch._C._nn.softshrink(c, m, out=ws_e[: rows.count])  # type: ignore[call-arg]
        r = frame.synth_(e, ws_r[: rows.count])
        rn = torch.linalg.vector_norm(r, dim=1).double()
        fails = rows.bump(fails, rows.running(rn > cfg.eta ** (k + 1) * (1 + 1e-6)))
        passes, resid = rows.assign(passes, k + 1), rows.assign(resid, rn)
        rn, r = rows.drop(rn == 0, rn, r)  # nothing left to fold in: retire now
        done = rn * fold_scale <= cfg.fold_tol
    out.mul_(norms[:, None])
    return KashinResult(out, passes, resid, fails, conv)


def _alternating_projections(frame: Frame, x: torch.Tensor, cfg: KashinConfig, fixed: bool = False) -> KashinResult:
    """From ``lv``'s representation, alternate ``s ← clip(s, ±L)`` and ``s ← s + √N Q (u − Qᵀ s/√N)`` row by
    row, keeping each row's best (exact) iterate; on the fixed schedule exactly ``ap_iters`` iterations."""
    start = _lv(frame, x, cfg, None, fixed)
    norms, u = unit_rows(x)
    rows = Rows(norms > 0, fixed)
    s = start.coeffs.div_(torch.where(norms > 0, norms, 1.0)[:, None])
    lim, stop = cfg.ap_level, cfg.ap_level * (1.0 + cfg.ap_tol)
    conv, passes = norms == 0, start.passes.clone()
    out = s.clone()  # every iterate below reconstructs x exactly
    u, s = rows.take(u), rows.take(s)
    best, best_lvl = s.clone(), s.abs().amax(dim=1)
    for it in range(cfg.ap_iters + 1):
        lvl = s.abs().amax(dim=1)
        better = rows.running(lvl < best_lvl)
        best, best_lvl = rows.update(better, s, best), rows.update(better, lvl, best_lvl)
        ok = lvl <= stop
        leave = rows.running(ok | (it == cfg.ap_iters))
        out, conv, u, s, best, best_lvl = rows.retire(leave, out, best, None, conv, ok, u, s, best, best_lvl)
        if rows.empty or it == cfg.ap_iters:
            break
        sub = s.clamp(-lim, lim)
        sub.add_(frame.coef(u - frame.synth_(sub.clone())))
        s = rows.update(None, sub, s)
        passes = rows.bump(passes)
    out.mul_(norms[:, None])
    return KashinResult(out, passes, start.residual, start.contraction_failures, conv)


# ---------------------------------------------------------------- linf: encode-time method
LINF_WARM_SCHEDULES = {"schedule": ((1.0, 1.9), (1.75, 1.7), (1.6, 1.8)), "constant": ((1.6, 1.8),) * 3}
"""``(L₀, β)`` of each over-relaxed alternating-projection step before the Douglas–Rachford phase, by
``KashinConfig.linf_warmup``.  ``schedule`` (default): a near-reflection (``β = 1.9``) of the excess over
1.0, then two relaxed steps just below the level, chosen by measuring transform pairs per row over a grid
of schedules (Gaussian, log-normal, 30 %-sparse and k-sparse inputs at d = 100, 2,000 and 25,450): at
d = 25,450 Gaussian inputs need 2.02 pairs against 3.05 with ``constant``, and no input class needs more.
The price is energy: the representation's mean ``s_j²`` is 1.113 ``‖x‖²`` against 1.077 (the minimum,
the minimum-norm representation's, is 1), which raises the declared MSE of ``sstq-flat`` and ``sstq-ma``
(b = 4, ε = 3) by 1.7 % and 1.2 %.
``constant``: the schedule of the results committed before ``schedule`` (same level, other coefficients),
kept to reproduce them."""
WARMUPS = tuple(LINF_WARM_SCHEDULES)
LINF_WARMUP = len(LINF_WARM_SCHEDULES["schedule"])
"""Over-relaxed alternating-projection iterations before the Douglas–Rachford phase (every schedule's length)."""
assert all(len(s) == LINF_WARMUP for s in LINF_WARM_SCHEDULES.values())
LINF_DR_RATIO = 0.97
"""The Douglas–Rachford phase aims at the box ``‖s‖_∞ ≤ 0.97 K`` (inside the public ``K``)."""


def _linf(frame: Frame, x: torch.Tensor, cfg: KashinConfig, idx: torch.Tensor | None = None,
          fixed: bool = False) -> KashinResult:
    """Exact representation with ``‖s‖_∞ ≤ K ‖x‖`` (``K = cfg.linf_level``), row by row.

    Start at the minimum-norm representation ``s = √N Q u``; ``LINF_WARMUP`` over-relaxed
    alternating projections ``s ← P_aff(s + β (clip(s, ±L₀) − s))`` (``(L₀, β)`` from
    :data:`LINF_WARM_SCHEDULES`) settle typical inputs; then Douglas–Rachford splitting for the feasibility problem
    box ``{‖s‖_∞ ≤ 0.97 K}`` ∩ affine set (Lions & Mercier 1979; Bauschke & Combettes 2017,
    §26.3): ``p = clip(z), s = P_aff(2p − z), z += s − p``, which, unlike plain alternating
    projections, makes steady progress when the intersection is thin (inputs equal to frame
    rows).  Every iterate ``s`` is exact; a row retires as soon as ``‖s‖_∞ ≤ K``; after
    ``cfg.linf_iters`` iterations the best exact iterate is returned (``converged`` False; the
    encoder then clips and counts).  ``passes`` counts transform pairs.  With ``idx`` only
    those coefficients are returned.  Rows never interact: a row's result and iteration
    count depend on that row alone.  On the fixed schedule every row runs all the iterations (and, with
    ``linf_fallback``, the ``lv`` fallback): the adaptive method's worst case.
    """
    n, dev = x.shape[0], x.device
    norms, u = unit_rows(x)
    rows = Rows(norms > 0, fixed)
    u = rows.take(u)
    out = torch.zeros(n, frame.N if idx is None else idx.shape[1], dtype=x.dtype, device=dev)
    passes = torch.zeros(n, dtype=torch.int64, device=dev)
    conv = torch.ones(n, dtype=torch.bool, device=dev)
    ws, s, wr = _workspace(rows.count, frame.N, frame.d, x.dtype, dev)
    s = frame.coef(u, s[: rows.count])
    stop, warm = cfg.linf_level * (1.0 - 1e-5), min(LINF_WARMUP, cfg.linf_iters)
    for it in range(warm + 1):
        ok = _sup(s) <= stop
        leave = rows.running(ok | (it == cfg.linf_iters))
        out, conv, u, s = rows.retire(leave, out, s, idx, conv, ok, u, s)
        if rows.empty or it == warm:
            break
        _warm_step(frame, s, ws, wr, *LINF_WARM_SCHEDULES[cfg.linf_warmup][it])
        passes = rows.bump(passes)
    if not rows.empty and cfg.linf_iters > LINF_WARMUP:
        out, conv = _douglas_rachford(frame, u, s.clone(), cfg, rows, out, idx, passes, conv)
    out.mul_(norms[:, None])
    zeros = torch.zeros(n, dtype=torch.float64, device=dev)
    return KashinResult(out, passes, zeros, torch.zeros(n, dtype=torch.int64, device=dev), conv)


def _sup(s: torch.Tensor) -> torch.Tensor:
    """``‖s‖_∞`` per row, as ``max(max s, −min s)``: no ``[n, N]`` temporary (``abs().amax`` allocates one,
    ``vector_norm(ord=inf)`` is slower still on CPU)."""
    return torch.maximum(s.amax(dim=1), s.amin(dim=1).neg_())


def _warm_step(frame: Frame, s: torch.Tensor, ws: torch.Tensor, wr: torch.Tensor, target: float, relax: float) -> None:
    """In place, ``s ← P_aff(s − β e)`` with ``e = s − clip(s, ±L₀)`` (``L₀ = target``, ``β = relax``) for an
    exact ``s``: as ``Qᵀ s = √N u`` already, ``P_aff(s − β e) = s − β e + β Q Qᵀ e`` (no copy of ``s``)."""
    n = s.shape[0]
    e = torch._C._nn.softshrink(s, target, out=ws[:n])  # type: ignore[call-arg]
    s.sub_(e, alpha=relax)
    s.add_(frame.gram_(e, wr), alpha=relax)


def _douglas_rachford(frame: Frame, u: torch.Tensor, s: torch.Tensor, cfg: KashinConfig, rows: Rows,
                      out: torch.Tensor, idx: torch.Tensor | None, passes: torch.Tensor,
                      conv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Douglas–Rachford phase of :func:`_linf` for the rows still above ``K``; returns ``out`` and ``conv`` with
    their results (``passes`` in place).  Rows that reach the iteration cap return the better of their
    best iterate and ``lv``'s representation (the box may not meet the affine set for them: then the DR
    iterates drift away)."""
    box, stop = LINF_DR_RATIO * cfg.linf_level, cfg.linf_level * (1.0 - 1e-5)
    z, best = s.clone(), s.clone()
    best_lvl = _sup(s)
    ws, wr, tgt = torch.empty_like(s), torch.empty_like(u), frame.target(u)
    for it in range(LINF_WARMUP, cfg.linf_iters):
        p = z.clamp(-box, box)
        s = frame.affine_(torch.add(p, p, out=s).sub_(z), tgt, ws, wr)
        z.add_(s).sub_(p)
        passes = rows.bump(passes)
        lvl = _sup(s)
        better = lvl < best_lvl
        best, best_lvl = rows.update(better, s, best), rows.update(better, lvl, best_lvl)
        ok = lvl <= stop
        leave = rows.running(ok | (it + 1 == cfg.linf_iters))
        if cfg.linf_fallback and it + 1 == cfg.linf_iters:
            best = _lv_fallback(frame, u, cfg, best, best_lvl, leave & ~ok, rows.fixed)
        out, conv, u, s, z, best, best_lvl, tgt = rows.retire(leave, out, best, idx, conv, ok, u, s, z, best,
                                                              best_lvl, tgt)
        if rows.empty:
            break
        ws, wr = ws[: rows.count], wr[: rows.count]
    return out, conv


def _lv_fallback(frame: Frame, u: torch.Tensor, cfg: KashinConfig, best: torch.Tensor, best_lvl: torch.Tensor,
                 rows: torch.Tensor, fixed: bool) -> torch.Tensor:
    """``best`` with ``best[rows] ← lv(u[rows])`` where that has the lower level, in place; on the fixed
    schedule ``lv`` runs on every row."""
    if fixed:
        alt = _lv(frame, u, cfg, None, fixed=True).coeffs
        return masked(rows & (_sup(alt) < best_lvl), alt, best)
    if not bool(rows.any()):
        return best
    at = torch.nonzero(rows).flatten()
    alt = _lv(frame, u[at], cfg, None).coeffs
    lvl = _sup(alt)
    take = lvl < best_lvl[at]
    best[at[take]], best_lvl[at[take]] = alt[take], lvl[take]
    return best
