"""Privacy events (and, as it grows, the ledger that composes them)."""

from .events import NonPrivateEvent, PrivacyEvent, PureDpEvent

__all__ = ["NonPrivateEvent", "PrivacyEvent", "PureDpEvent"]
