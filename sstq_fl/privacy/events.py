"""Privacy events: small immutable records whose meaning never changes once written.

Each event states exactly what was released and under which neighbouring relation.  The
encoders declare one event per message; the accounting layer composes them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import ClassVar


@dataclass(frozen=True)
class PrivacyEvent:
    kind: ClassVar[str] = "abstract"

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class PureDpEvent(PrivacyEvent):
    """One release of a pure ``ε``-DP mechanism: for all neighbouring inputs ``x, x'`` and all
    output sets ``S``, ``P[M(x) ∈ S] ≤ e^ε P[M(x') ∈ S]``.

    For a local randomizer the neighbouring relation is ``replace-one`` over the client's
    whole vector: any two inputs in the public ball are neighbours.
    """

    kind: ClassVar[str] = "pure_dp"
    epsilon: float
    relation: str = "replace_one"

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"epsilon must be positive and finite, got {self.epsilon}")


@dataclass(frozen=True)
class NonPrivateEvent(PrivacyEvent):
    """A release with no privacy guarantee (``ε = ∞``), e.g. the ``clean`` reference encoder."""

    kind: ClassVar[str] = "non_private"
    reason: str = "no randomization"
