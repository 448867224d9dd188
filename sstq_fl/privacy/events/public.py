"""A computation on public data only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..pld import PLD, identity
from .base import PrivacyEvent

if TYPE_CHECKING:
    import dp_accounting


@dataclass(frozen=True)
class PublicDataEvent(PrivacyEvent, kind="public"):
    """A computation on public data only (no privacy cost); recorded so the transcript says so.

    It is ``0``-DP: its PLD is the identity (loss 0), its RDP dp-accounting's ``NoOpDpEvent``."""

    description: str = ""

    def validate(self, relation: str, interval: float) -> None:
        """Nothing to refuse: its PLD is the identity under either relation."""

    def pld(self, relation: str, interval: float) -> PLD:
        return identity(interval)

    def rdp(self, relation: str) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.NoOpDpEvent()

    def pure_epsilon(self) -> float:
        return 0.0
