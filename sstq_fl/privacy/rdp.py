"""An independent Rényi-DP figure for a ledger's events (dp-accounting's RDP accountant).

Each event maps itself onto dp-accounting's ``DpEvent`` (:meth:`PrivacyEvent.rdp`, add-or-remove
semantics); the accountant composes RDP additively over orders (Mironov, CSF 2017, Prop. 1) and
converts to ``(ε, δ)`` (Mironov, CSF 2017, Prop. 3, with dp-accounting's tighter conversion).  The
figure is a cross-check of the PLD accountant, never the reported ε.
"""

from __future__ import annotations

from collections.abc import Iterable

from .events.base import PrivacyEvent


def rdp_epsilon(events: Iterable[tuple[PrivacyEvent, int]], relation: str, delta: float) -> float | None:
    """ε at ``delta`` of ``count`` runs of each ``(event, count)`` under ``relation`` by RDP, or
    ``None`` where an event has no RDP form or the figure overflows."""
    import dp_accounting

    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    try:
        for event, count in events:
            acc.compose(event.rdp(relation), count)
        return float(acc.get_epsilon(delta))
    except (ValueError, ArithmeticError):  # unsupported events; ε so large that ε² overflows
        return None
