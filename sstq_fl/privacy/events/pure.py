"""Pure ε-DP events: any ε-DP release, and the exponential mechanism."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UnsupportedEventError
from ..pld import PLD, pure_pld
from ..pure_composition import amplified_pure_epsilon
from .base import PrivacyEvent, check_positive, check_relation

if TYPE_CHECKING:
    import dp_accounting


@dataclass(frozen=True)
class PureDpEvent(PrivacyEvent, kind="pure_dp"):
    """One release of a pure ``ε``-DP mechanism: for all neighbouring inputs ``x, x'`` and all
    output sets ``S``, ``P[M(x) ∈ S] ≤ e^ε P[M(x') ∈ S]``.

    An LDP message is this event with ``relation='replace_one'`` over the client's whole
    vector (any two inputs in the public ball are neighbours).  Its privacy-loss
    distribution is that of binary randomized response with parameter ``ε``, the tight
    dominating pair of every ε-DP mechanism (Kairouz, Oh & Viswanath, ICML 2015, Sec. 3).
    It holds under ``relation`` only.  Poisson-subsampled at rate ``q`` it is
    ``log(1 + q(e^ε − 1))``-DP (Balle, Barthe & Gaboardi, NeurIPS 2018); its RDP
    cross-check is ``ε²/2``-zCDP (Bun & Steinke, TCC 2016, Prop. 1.4).
    """

    epsilon: float
    relation: str = "replace_one"

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_relation(self.relation)

    def validate(self, relation: str, interval: float) -> None:
        """Refuse a ledger under another relation than the event's, the one thing its two-point PLD
        refuses (checked without building it)."""
        if self.relation != relation:
            raise UnsupportedEventError(f"{self.kind} event holds under {self.relation}, but this ledger's relation is "
                                        f"{relation}")

    def pld(self, relation: str, interval: float) -> PLD:
        self.validate(relation, interval)
        return pure_pld(self.epsilon, interval)

    def sampled_pld(self, sampled: PrivacyEvent, q: float, relation: str, interval: float) -> PLD:
        return PureDpEvent(amplified_pure_epsilon(self.epsilon, q), self.relation).pld(relation, interval)

    def rdp(self, relation: str) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.ZCDpEvent(self.epsilon**2 / 2)

    def pure_epsilon(self) -> float:
        return self.epsilon


@dataclass(frozen=True)
class ExponentialMechanismEvent(PureDpEvent, kind="exponential_mechanism"):
    """The exponential mechanism with utility sensitivity ``Δu`` run at ``ε``: it selects ``r``
    with probability ``∝ exp(ε u(x, r) / (2 Δu))`` and is pure ``ε``-DP (McSherry & Talwar,
    FOCS 2007; Dwork & Roth 2014, Thm. 3.10); accounted as a pure-ε event (dp-accounting 0.6 has no event for it).
    """
