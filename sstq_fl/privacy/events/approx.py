"""Approximate (ε, δ)-DP: a release known only by its guarantee."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnsupportedEventError
from ..floats import finite_real
from ..pld import PLD, pure_pld
from .base import PrivacyEvent, check_relation


@dataclass(frozen=True)
class ApproxDpEvent(PrivacyEvent, kind="approx_dp"):
    """One release of an ``(ε, δ)``-DP mechanism (``ε ≥ 0``, ``0 < δ < 1``) known only by its guarantee: for all
    neighbouring inputs ``x, x'`` and all output sets ``S``, ``P[M(x) ∈ S] ≤ e^ε P[M(x') ∈ S] + δ`` (Dwork &
    Roth 2014, Def. 2.4).

    Its privacy-loss distribution is the tight dominating pair of every such mechanism: loss ``+∞`` with
    probability ``δ``, else that of binary randomized response at ``ε`` (Kairouz, Oh & Viswanath, ICML 2015,
    Sec. 3; dp-accounting's ``from_privacy_parameters``), so it composes with the other events on one PLD.
    It holds under ``relation`` only, and has no Poisson-subsampled or RDP form here.
    """

    epsilon: float
    delta: float
    relation: str = "replace_one"

    def __post_init__(self) -> None:
        if not finite_real(self.epsilon, "epsilon") >= 0:
            raise ValueError(f"epsilon must be non-negative, got {self.epsilon!r}")
        if not 0 < finite_real(self.delta, "delta") < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")
        check_relation(self.relation)

    def pld(self, relation: str, interval: float) -> PLD:
        if self.relation != relation:
            raise UnsupportedEventError(f"{self.kind} event holds under {self.relation}, but this ledger's relation is "
                                        f"{relation}")
        return pure_pld(self.epsilon, interval, self.delta)
