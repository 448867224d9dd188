"""The ℓ∞-minimal frame representation of a vector, with a certified lower bound: the reference the
Kashin methods (:mod:`.kashin`) are measured against (``sstq-fl bench kashin``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .frames import Frame
from .kashin import _sup


@dataclass
class LinfResult:
    """ℓ∞-minimal representation per row, bracketed: ``lower ≤ min level ≤ level``."""

    coeffs: torch.Tensor  # [n, N] best exact representation found (scaled units)
    level: torch.Tensor  # [n] ‖coeffs‖_∞ / ‖x‖: an upper bound on the minimal level
    lower: torch.Tensor  # [n] dual certificate: a lower bound on the minimal level
    dual: torch.Tensor  # [n, d] the certifying y
    iters: int


def linf_min(frame: Frame, x: torch.Tensor, iters: int = 1000, tau: float = 0.3, check_every: int = 25,
             gap: float = 1e-3) -> LinfResult:
    """``min ‖s‖_∞ s.t. Qᵀ s = √N u`` (``u = x/‖x‖``) per row, with a certified lower bound.

    Douglas–Rachford splitting on ``‖s‖_∞ + ι{Qᵀs = √N u}`` (Lions & Mercier 1979; it is
    Chambolle & Pock 2011's primal–dual algorithm with ``K = I``, ``στ = 1``), step ``τ N``:
    ``p = prox_{τN‖·‖_∞}(z)`` (Moreau: ``z − P_{ℓ1-ball τN}(z)``), ``s = P_aff(2p − z)``,
    ``z += s − p``.  Every ``s`` is exact, so ``‖s‖_∞`` bounds the minimum from above.  The dual
    (Lagrange) problem is ``max √N⟨u, y⟩ s.t. ‖Q y‖_1 ≤ 1``; weak duality: for any ``y``,
    ``√N ⟨u, y⟩ = ⟨s, Q y⟩ ≤ ‖s‖_∞ ‖Q y‖_1`` for every feasible ``s``, so
    ``N |⟨u, y⟩| / ‖√N Q y‖_1`` is a lower bound.  The certificate ``y = Qᵀ (z − p)`` projects
    the subgradient estimate ``(z − p)/τ ∈ ∂‖p‖_∞`` onto the range of ``Q`` (at a fixed point it
    lies there).  Stops when every row's relative gap is below ``gap``.
    """
    u = (x / torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min(1e-300)).double()
    z = frame.coef(u)
    t = torch.full((x.shape[0],), tau * frame.N, dtype=u.dtype, device=u.device)
    best, level = z.clone(), _sup(z)
    lower, dual = torch.zeros_like(level), torch.zeros_like(u)
    ws, wr, tgt = torch.empty_like(z), torch.empty_like(u), frame.target(u)
    it = 0
    for it in range(1, iters + 1):
        p = z - _project_l1_ball(z, t)
        s = frame.affine_(2.0 * p - z, tgt, ws, wr)
        z.add_(s).sub_(p)
        lvl = _sup(s)
        better = lvl < level
        best[better], level[better] = s[better], lvl[better]
        if it % check_every == 0 or it == iters:
            y = frame.synth_(z - p)
            cert = dual_bound(frame, u, y)
            up = cert > lower
            lower[up], dual[up] = cert[up], y[up]
            if bool(((level - lower) <= gap * level).all()):
                break
    return LinfResult(best, level, lower, dual, it)


def dual_bound(frame: Frame, u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Weak-duality lower bound ``N |⟨u, y⟩| / (‖u‖ ‖√N Q y‖_1)`` on the minimal level of ``u``."""
    num = frame.N * (u * y).sum(1).abs()
    den = frame.coef(y).abs().sum(1) * torch.linalg.vector_norm(u, dim=1)
    return num / den.clamp_min(1e-300)


def _project_l1_ball(z: torch.Tensor, radius: torch.Tensor) -> torch.Tensor:
    """Row-wise Euclidean projection onto ``{‖v‖_1 ≤ radius}`` (Duchi et al. 2008, by sorting):
    ``sign(z) (|z| − θ)_+`` with ``θ`` the threshold that meets the radius."""
    a = z.abs()
    srt = a.sort(dim=1, descending=True).values
    cums = srt.cumsum(1) - radius[:, None]
    k = torch.arange(1, z.shape[1] + 1, dtype=z.dtype, device=z.device)
    cand = cums / k
    count = (srt > cand).sum(1).clamp_min(1)
    theta = cand.gather(1, (count - 1)[:, None]).clamp_min(0.0)
    return torch.sign(z) * (a - theta).clamp_min(0.0)
