"""What the privacy layer refuses: its errors, the user's budget, and the execution limit.

Every refusal is one of the ``ValueError`` subclasses below, with a one-line message naming
the event or the line at fault, never a silently wrong number (as dp-accounting's accountants
refuse the events they do not support, ``dp_accounting.UnsupportedEventError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_EVENTS = 10**7  # mechanism executions per ledger (per event line, per plan, in total)


class UnsupportedEventError(ValueError):
    """The ledger cannot account for this event under its neighbouring relation."""


class BudgetExceededError(ValueError):
    """A declared plan would spend more than the user's budget."""


class PlanExceededError(ValueError):
    """A recorded event was not declared in the plan (or exceeds its declared count)."""


class AccountingLimitError(ValueError):
    """The composition exceeds :data:`MAX_EVENTS` or the size limits of a privacy-loss distribution
    (:data:`sstq_fl.privacy.pld.MAX_PLD_POINTS`, :data:`sstq_fl.privacy.pld.MAX_PLD_WORK`)."""


class TranscriptError(ValueError):
    """A transcript (or a metrics binding) that is malformed, inconsistent or not a transcript.

    The message is always one line (line breaks in quoted content are escaped)."""

    def __init__(self, message: str):
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))


@dataclass(frozen=True)
class Budget:
    """The user's total budget ``(ε, δ)`` for a run."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ValueError(f"budget epsilon must be positive, got {self.epsilon}")
        if not 0 <= self.delta < 1:
            raise ValueError(f"budget delta must be in [0, 1), got {self.delta}")


def check_count(count: Any, what: str = "count", minimum: int = 0) -> int:
    """``count`` if it is an integer (not a bool) in ``[minimum, MAX_EVENTS]``, else ValueError."""
    if isinstance(count, bool) or not isinstance(count, int) or not minimum <= count <= MAX_EVENTS:
        kind = "a positive" if minimum == 1 else "a non-negative"
        raise ValueError(f"{what} must be {kind} integer of at most {MAX_EVENTS}, got {short_repr(count)}")
    return count


def short_repr(v: Any, limit: int = 60) -> str:
    """``repr(v)`` cut to ``limit`` characters (error messages stay one short line)."""
    try:
        r = repr(v)
    except (RecursionError, ValueError):  # very deep containers; ints beyond str()'s digit limit
        r = f"<{type(v).__name__}>"
    return r if len(r) <= limit else r[: limit - 3] + "..."
