"""A release with no privacy guarantee."""

from __future__ import annotations

from dataclasses import dataclass

from ..pld import PLD
from .base import PrivacyEvent


@dataclass(frozen=True)
class NonPrivateEvent(PrivacyEvent, kind="non_private"):
    """A release with no privacy guarantee (``ε = ∞``), e.g. the ``clean`` reference encoder.

    Its PLD is ``None`` (every composition with it is non-private); it has no RDP form."""

    reason: str = "no randomization"

    def pld(self, relation: str, interval: float) -> PLD | None:
        return None
