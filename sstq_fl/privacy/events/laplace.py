"""The Laplace mechanism (Dwork, McSherry, Nissim & Smith, TCC 2006; Dwork & Roth 2014, Thm. 3.6)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnsupportedEventError
from ..pld import PLD, check_dense_width
from .base import PrivacyEvent, check_positive


@dataclass(frozen=True)
class LaplaceEvent(PrivacyEvent, kind="laplace"):
    """The Laplace mechanism with scale ``b = noise_multiplier · Δ₁`` (``add_or_remove_one`` only).

    Its privacy loss lies in ``[−1/b', 1/b']`` for ``b' = noise_multiplier`` (it is
    ``1/noise_multiplier``-DP), so its PLD spans ``2/noise_multiplier``; the PLD is
    dp-accounting's ``from_laplace_mechanism``, on a Poisson subsample that of the subsampled
    mixture (its dominating pair: Zhu, Dong & Wang, AISTATS 2022).  It has no RDP cross-check here.
    """

    noise_multiplier: float

    def __post_init__(self) -> None:
        check_positive("noise_multiplier", self.noise_multiplier)

    def loss_width(self) -> float:
        """The span ``2/noise_multiplier`` of its privacy loss."""
        return 2 / self.noise_multiplier

    def pld(self, relation: str, interval: float) -> PLD:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        require_add_or_remove(self, relation)
        check_dense_width(self, self.loss_width(), interval)
        return pld_lib.from_laplace_mechanism(self.noise_multiplier, value_discretization_interval=interval)

    def sampled_pld(self, sampled: PrivacyEvent, q: float, relation: str, interval: float) -> PLD:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        require_add_or_remove(sampled, relation)
        check_dense_width(sampled, self.loss_width(), interval)
        return pld_lib.from_laplace_mechanism(self.noise_multiplier, value_discretization_interval=interval,
                                              sampling_prob=q)


def require_add_or_remove(event: PrivacyEvent, relation: str) -> None:
    """Refuse ``event`` under a relation other than add_or_remove_one."""
    if relation != "add_or_remove_one":
        raise UnsupportedEventError(f"{event.kind} is accounted only under add_or_remove_one (ledger: {relation})")
