"""A computation on public data only."""

from __future__ import annotations

from dataclasses import dataclass

import dp_accounting

from ..pld import PLD, identity
from .base import PrivacyEvent


@dataclass(frozen=True)
class PublicDataEvent(PrivacyEvent, kind="public"):
    """A computation on public data only (no privacy cost); recorded so the transcript says so.

    It is ``0``-DP: its PLD is the identity (loss 0), its RDP dp-accounting's ``NoOpDpEvent``."""

    description: str = ""

    def pld(self, relation: str, interval: float) -> PLD:
        return identity(interval)

    def rdp(self, relation: str) -> dp_accounting.DpEvent:
        return dp_accounting.NoOpDpEvent()

    def pure_epsilon(self) -> float:
        return 0.0
