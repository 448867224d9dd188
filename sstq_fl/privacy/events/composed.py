"""Composition as data: an event run many times, and events run in sequence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..pld import PLD, check_self_compose, compose_plds, identity
from .base import PrivacyEvent

if TYPE_CHECKING:
    import dp_accounting


@dataclass(frozen=True)
class SelfComposedEvent(PrivacyEvent, kind="self_composed"):
    """``event`` run ``count`` times on the same data (adaptive composition).

    Its PLD is the ``count``-fold convolution of the inner PLD (dp-accounting's
    ``self_compose``; Koskela, Jälkö & Honkela, AISTATS 2020), size-checked first; ``count = 0``
    reveals nothing; a non-private inner event makes it non-private.  Its RDP is the inner
    RDP times ``count`` (Mironov, CSF 2017, Prop. 1).
    """

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and not isinstance(self.count, bool) and self.count >= 0):
            raise ValueError(f"count must be a non-negative integer, got {self.count!r}")

    def weight(self) -> int:
        return self.count * self.event.weight()

    def pld(self, relation: str, interval: float) -> PLD | None:
        inner = self.event.pld(relation, interval)  # validated even when count is 0
        if self.count == 0:
            return identity(interval)
        if inner is None:
            return None
        check_self_compose(inner, self.count, self.event, interval)
        return inner.self_compose(self.count)

    def rdp(self, relation: str) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.SelfComposedDpEvent(self.event.rdp(relation), self.count)


@dataclass(frozen=True)
class ComposedEvent(PrivacyEvent, kind="composed"):
    """Every event in ``events`` run once, in order, on the same data.

    Its PLD is the convolution of theirs (non-private as soon as one is), its RDP the sum of
    theirs (Mironov, CSF 2017, Prop. 1), its weight the sum of their weights.
    """

    events: tuple[PrivacyEvent, ...]

    def weight(self) -> int:
        return sum(e.weight() for e in self.events)

    def pld(self, relation: str, interval: float) -> PLD | None:
        return compose_plds((e.pld(relation, interval) for e in self.events), interval)

    def rdp(self, relation: str) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.ComposedDpEvent([e.rdp(relation) for e in self.events])
