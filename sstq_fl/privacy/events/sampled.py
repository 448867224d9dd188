"""Poisson subsampling of an event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..pld import PLD
from .base import PrivacyEvent

if TYPE_CHECKING:
    import dp_accounting


@dataclass(frozen=True)
class PoissonSampledEvent(PrivacyEvent, kind="poisson_sampled"):
    """``event`` run on a Poisson subsample: each record (or client) is included
    independently with probability ``sampling_probability``.  Amplification assumes the
    observer does not learn who was included.

    Accounted by delegation: its PLD is the inner event's :meth:`~PrivacyEvent.sampled_pld`
    (the inner event refuses when it has none); its RDP cross-check is dp-accounting's
    ``PoissonSampledDpEvent`` of the inner one, under ``add_or_remove_one`` only (Mironov,
    Talwar & Zhang 2019, "Rényi differential privacy of the sampled Gaussian mechanism").
    """

    sampling_probability: float
    event: PrivacyEvent

    def __post_init__(self) -> None:
        if isinstance(self.sampling_probability, bool) or not 0 < self.sampling_probability <= 1:
            raise ValueError(f"sampling_probability must be in (0, 1], got {self.sampling_probability!r}")

    def weight(self) -> int:
        return self.event.weight()

    def pld(self, relation: str, interval: float) -> PLD:
        return self.event.sampled_pld(self, self.sampling_probability, relation, interval)

    def rdp(self, relation: str) -> dp_accounting.DpEvent:
        if relation != "add_or_remove_one":
            return super().rdp(relation)
        import dp_accounting

        return dp_accounting.PoissonSampledDpEvent(self.sampling_probability, self.event.rdp(relation))
