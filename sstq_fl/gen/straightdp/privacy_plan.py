"""StraightDP's budget: the Stage 1 share, the joint DP-SGD calibration and the THA clip profile, all on one
``ADD_OR_REMOVE_ONE`` PLD ledger (DP-SGD's accounting: Abadi et al., CCS 2016).

* Stage 1 is two Gaussian releases with the same multiplier ``σ₁`` (``σ₂ = σ₁``, our choice), each at its exact
  add/remove shift (:mod:`.moments`): the whitened counts and sums (Δ = √5/2: ``GaussianEvent(σ₁)`` with the noise
  std ``σ₁·√5/2``) and the average-form second moment (Frobenius Δ = R_f²/N_decl: ``GaussianEvent(σ₁)`` with the
  std ``σ₁·R_f²/N_decl``).  ``σ₁`` is calibrated so
  that Stage 1 **alone** is ``(ρ_mom/(ρ_mom+ρ_sgd)·ε, δ)``, with the declared weights ρ_mom = 0.2, ρ_sgd = 0.65
  (share 0.235), and **then** the DP-SGD multiplier is bisected so that the joint PLD of both releases and every
  step meets ``ε`` at ``δ`` (:func:`calibrate_joint`): the smallest σ whose whole plan fits.
* ``moments`` alone gives all of ε to Stage 1; ``sgd`` (uniform DP-SGD) all of it to the steps.
* THA (time-bucketed clipping): ``K`` equal-width buckets of ``[τ, 1]``, ``T/K`` steps each, clip
  ``C_k = C_ref·γ·C_β(t̄_k)/mean_k C_β(t̄_k)`` with ``C_β(t) = (√V̄(t)/(1−t))^β`` (w ≡ 1) and one absolute noise
  std ``s`` shared by all buckets, ``σ_k = s/C_k``, bisected on the PLD of the whole declared plan
  (:func:`tha_plan`).  ``β = 0`` is uniform clipping, always feasible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...privacy.calibration import calibrate_noise_multiplier
from ...privacy.events import GaussianEvent, PoissonSampledEvent, PrivacyEvent

RELATION = "add_or_remove_one"
RHO_MOM, RHO_SGD = 0.2, 0.65  # declared weights; the moment share is ρ_mom/(ρ_mom+ρ_sgd)
MOMENT_SHARE = RHO_MOM / (RHO_MOM + RHO_SGD)
MOMENT_RELEASES = 2  # counts + sums, and the second moment, each GaussianEvent(σ₁)
Plan = list[tuple[PrivacyEvent, int]]


def moment_plan(sigma1: float) -> Plan:
    """Stage 1's events: the two Gaussian releases at the multiplier ``σ₁``."""
    return [(GaussianEvent(sigma1), MOMENT_RELEASES)]


def calibrate_moments(epsilon: float, delta: float) -> float:
    """``σ₁``: the smallest multiplier with ``2 × GaussianEvent(σ₁)`` ``(epsilon, δ)``-DP under add/remove."""
    return calibrate_noise_multiplier(epsilon, delta, moment_plan, RELATION)


def sgd_plan(q: float, buckets: Sequence[tuple[float, int]]) -> Plan:
    """DP-SGD's events: ``steps × PoissonSampled(q, Gaussian(σ))`` per ``(σ, steps)`` bucket."""
    return [(PoissonSampledEvent(q, GaussianEvent(s)), n) for s, n in buckets if n > 0]


def calibrate_joint(epsilon: float, delta: float, prefix: Plan, q: float, steps: int) -> float:
    """Uniform DP-SGD's ``σ``: the smallest multiplier whose ``prefix`` (Stage 1, or nothing) plus ``steps`` sampled
    Gaussian steps the ledger certifies ``(epsilon, δ)`` (bisection on the joint PLD)."""
    return calibrate_noise_multiplier(epsilon, delta, lambda s: [*prefix, *sgd_plan(q, [(s, steps)])], RELATION)


def bucket_steps(steps: int, k: int) -> list[int]:
    """``steps`` split over ``k`` buckets as evenly as possible (``T/K`` each, the remainder to the first ones)."""
    if steps < 0 or k < 1:
        raise ValueError(f"need steps >= 0 and k >= 1, got {steps}, {k}")
    return [steps // k + (1 if i < steps % k else 0) for i in range(k)]


def bucket_edges(tau: float, k: int) -> np.ndarray:
    """``k + 1`` edges of equal-width buckets on ``[τ, 1]`` (our choice)."""
    if not (0 <= tau < 1 and k >= 1):
        raise ValueError(f"need 0 <= tau < 1 and k >= 1, got {tau}, {k}")
    return np.linspace(tau, 1.0, k + 1)


def clip_profile(variance_trace: Callable[[float], float], edges: np.ndarray, beta: float, c_ref: float,
                 gamma: float) -> np.ndarray:
    """THA clips ``C_k = C_ref·γ·C_β(t̄_k)/mean C_β`` with ``C_β(t) = (√V̄(t)/(1−t))^β`` at the bucket midpoints t̄_k
    (``w ≡ 1``; ``V̄(t) = tr(Σ − t²ΣA_t⁻¹Σ)`` from the released or public mixture).  ``β = 0``: ``C_ref·γ`` in every
    bucket."""
    if not (beta >= 0 and c_ref > 0 and gamma > 0):
        raise ValueError(f"need beta >= 0, c_ref > 0, gamma > 0; got {beta}, {c_ref}, {gamma}")
    mids = (edges[:-1] + edges[1:]) / 2
    raw = np.array([(math.sqrt(max(variance_trace(float(t)), 0.0)) / max(1.0 - t, 1e-6)) ** beta for t in mids])
    if not (np.all(np.isfinite(raw)) and np.all(raw > 0)):
        raise ValueError("THA clip profile is not positive and finite (a zero posterior variance?)")
    return c_ref * gamma * raw / raw.mean()


@dataclass(frozen=True)
class ThaPlan:
    """A calibrated THA plan: bucket edges on ``[τ, 1]``, steps, clips ``C_k`` and multipliers ``σ_k = s/C_k``."""

    edges: tuple[float, ...]
    steps: tuple[int, ...]
    clips: tuple[float, ...]
    noise_std: float
    beta: float

    @property
    def multipliers(self) -> tuple[float, ...]:
        """``σ_k = s/C_k`` (all 0 for a non-private plan, ``s = 0``)."""
        return tuple(self.noise_std / c for c in self.clips)

    def events(self, q: float) -> Plan:
        return sgd_plan(q, list(zip(self.multipliers, self.steps, strict=True)))

    def bucket_of(self, step: int) -> int:
        """The bucket of 1-based ``step`` (buckets run in order, ``steps[k]`` rounds each)."""
        return int(np.searchsorted(np.cumsum(self.steps), step, side="left"))


def tha_plan(epsilon: float, delta: float, prefix: Plan, q: float, steps: int, edges: np.ndarray,
             clips: np.ndarray, beta: float) -> ThaPlan:
    """Bisect the shared absolute noise std ``s`` (``σ_k = s/C_k``) so that ``prefix`` plus every bucket's steps meet
    ``(epsilon, δ)`` on the PLD of the whole declared plan (bisected on the PLD of the whole plan, not on an RDP bound)."""
    per = bucket_steps(steps, len(clips))
    s = calibrate_noise_multiplier(
        epsilon, delta, lambda std: [*prefix, *sgd_plan(q, [(std / c, n) for c, n in zip(clips, per, strict=True)])],
        RELATION)
    return ThaPlan(tuple(float(e) for e in edges), tuple(per), tuple(float(c) for c in clips), float(s), float(beta))
