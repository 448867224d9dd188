"""The privacy event: a small immutable record of one mechanism run, and its strict JSON form.

An event states exactly which mechanism was run, with which parameters, in the manner of
dp-accounting's ``DpEvent``; the neighbouring relation is the ledger's (one per ledger), except
for the pure-ε events that state the relation their guarantee holds under.  An event also says
how it is accounted, so that the ledger never inspects its type:

* :meth:`PrivacyEvent.pld`: its privacy-loss distribution under a relation (Koskela, Jälkö &
  Honkela, AISTATS 2020), size-checked by :mod:`sstq_fl.privacy.pld` before it is built;
* :meth:`PrivacyEvent.validate`: what its PLD would refuse, checked when the ledger first sees
  it (by default by building the PLD; a pure-ε event checks its relation without dp-accounting);
* :meth:`PrivacyEvent.sampled_pld`: the PLD of the event run on a Poisson subsample;
* :meth:`PrivacyEvent.rdp`: the dp-accounting ``DpEvent`` of its Rényi-DP cross-check
  (Mironov, CSF 2017), under add-or-remove-one semantics;
* :meth:`PrivacyEvent.rdp_curve`: for an event accounted by Rényi DP alone (``accounted_by = "rdp"``,
  a mechanism whose guarantee is published as an RDP bound, not a privacy-loss distribution), its RDP
  ``ε(α)`` at given orders under a relation; a ledger holding such an event composes by RDP
  (:func:`sstq_fl.privacy.rdp.curve_epsilon`) and refuses any event without a curve;
* :meth:`PrivacyEvent.pure_epsilon`: its ε when it is one pure ε-DP release;
* :meth:`PrivacyEvent.weight`: how many mechanism executions it stands for.

What an event does not support is refused with :class:`UnsupportedEventError` naming it (the
defaults below), as dp-accounting's accountants refuse the events they do not support.
dp-accounting itself is imported where a PLD or an RDP event is built, not with this package: a
ledger of pure-ε events alone answers its ε and δ without it.

Each event class registers its ``kind`` in :data:`EVENTS` (``class E(PrivacyEvent,
kind="name")``); a second class under a taken kind is a one-line error.  Every module of this
package is one of the registry's built-in modules, imported on the first look-up, so that a
transcript naming a kind replays whatever was imported before.  Events serialise to
JSON (``to_json``/``from_json``) so that a transcript can be replayed without any code but the
events'.  Kinds are added, never changed: a transcript written today replays to the same number
tomorrow.
"""

from __future__ import annotations

import math
import pkgutil
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...registry import Registry
from ..errors import UnsupportedEventError, short_repr
from ..floats import finite_real
from ..pld import PLD

if TYPE_CHECKING:
    import dp_accounting

RELATIONS = ("replace_one", "add_or_remove_one")
MAX_EVENT_DEPTH = 16  # nesting of event objects accepted by from_json (poisson_sampled of self_composed of ...)
MAX_COMPOSED_EVENTS = 1000  # events in one composed event accepted by from_json
EVENTS: Registry[type[PrivacyEvent]] = Registry("privacy event", builtins=[  # every module of this package
    f"{__package__}.{m.name}" for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name != "base"])


@dataclass(frozen=True)
class PrivacyEvent:
    """One private computation; subclasses are frozen dataclasses whose fields are its parameters.

    ``class MyEvent(PrivacyEvent, kind="my_event")`` registers the class under its kind (the
    ``"kind"`` of its JSON form).  A subclass without ``kind=`` is not registered."""

    kind: ClassVar[str] = "abstract"
    accounted_by: ClassVar[str] = "pld"  # "rdp": composed by its RDP curve (rdp_curve), never by a PLD

    def __init_subclass__(cls, kind: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None:
            EVENTS.register(kind, cls)
            cls.kind = kind

    # ------------------------------------------------------------------ accounting (defaults refuse)
    def weight(self) -> int:
        """How many mechanism executions this event stands for (the unit of the ledger's
        :data:`~sstq_fl.privacy.errors.MAX_EVENTS`): 1 for one mechanism."""
        return 1

    def pld(self, relation: str, interval: float) -> PLD | None:
        """The privacy-loss distribution of this event under ``relation`` on a grid of spacing
        ``interval``; ``None`` for a release with no privacy guarantee."""
        raise UnsupportedEventError(f"the ledger cannot account for a {type(self).__name__} ({self.kind}) event")

    def validate(self, relation: str, interval: float) -> None:
        """Refuse this event where :meth:`pld` would (the ledger's check when it first sees the
        event); by default the PLD is built, size-checked, and dropped."""
        self.pld(relation, interval)

    def sampled_pld(self, sampled: PrivacyEvent, q: float, relation: str, interval: float) -> PLD:
        """The PLD of this event run on a Poisson subsample of rate ``q`` (``sampled`` is the
        subsampled event, named in refusals)."""
        raise UnsupportedEventError(f"Poisson subsampling of a {self.kind} event is not supported by the ledger")

    def rdp(self, relation: str) -> dp_accounting.DpEvent:
        """dp-accounting's ``DpEvent`` for the RDP accountant (add-or-remove-one semantics) of this
        event under ``relation``."""
        raise UnsupportedEventError(f"no RDP cross-check for a {self.kind} event under {relation}")

    def rdp_curve(self, relation: str, orders: np.ndarray) -> np.ndarray:
        """RDP ``ε(α)`` of one run of this event under ``relation`` at each of ``orders`` (all ``> 1``; ``inf``
        where its bound does not hold).  By default a pure ``ε``-DP event's ``min(ε, αε²/2)``
        (``ε²/2``-zCDP: Bun & Steinke, TCC 2016, Prop. 1.4; and ``D_α ≤ ε`` for every α); anything else refuses."""
        eps = self.pure_epsilon()
        if eps is None:
            raise UnsupportedEventError(f"a {self.kind} event has no RDP curve: it cannot be composed with "
                                        f"RDP-accounted events")
        return np.minimum(eps, orders * eps * eps / 2)

    def pure_epsilon(self) -> float | None:
        """``ε`` when this event is one pure ε-DP release (``0`` for one that reveals nothing
        private), ``None`` otherwise: the ledger then answers by the exact pure composition."""
        return None

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        """``{"kind": kind, field: value, ...}``, nested events as their JSON objects."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, PrivacyEvent):
                v = v.to_json()
            elif isinstance(v, tuple):
                v = [e.to_json() for e in v]
            out[f.name] = v
        return out

    @staticmethod
    def from_json(obj: Any, depth: int = 0) -> PrivacyEvent:
        """Rebuild an event from :meth:`to_json` output, strictly.

        The object must carry exactly ``kind`` and the kind's fields (no unknown key, no
        missing one), each of its declared JSON type: a real number (never a bool; an integer
        is widened to float) for ``float`` fields, an integer (never a bool) for ``int``
        fields, a string for ``str`` fields, an event object (nested at most
        :data:`MAX_EVENT_DEPTH` deep) for ``event`` and a list of them for ``events``.
        Anything else raises :class:`ValueError` naming the field.
        """
        cls = _event_class(obj, depth)
        names = {f.name for f in fields(cls)}
        extra, missing = set(obj) - names - {"kind"}, names - set(obj)
        if extra or missing:
            raise ValueError(f"{cls.kind} event: {_key_problem(extra, missing)}")
        args = {f.name: _field_value(cls.kind, f.name, str(f.type), obj[f.name], depth) for f in fields(cls)}
        return cls(**args)


def _event_class(obj: Any, depth: int) -> type[PrivacyEvent]:
    """The event class named by ``obj['kind']`` (refusing non-objects, unknown kinds, deep nesting)."""
    if depth > MAX_EVENT_DEPTH:
        raise ValueError(f"privacy events nested more than {MAX_EVENT_DEPTH} deep")
    if not isinstance(obj, dict) or "kind" not in obj:
        raise ValueError(f"not a privacy event (an object with a 'kind'): {short_repr(obj)}")
    kind = obj["kind"]
    if not isinstance(kind, str) or kind not in EVENTS:
        raise ValueError(f"unknown privacy event kind {short_repr(kind)}; known: {EVENTS.names()}")
    return EVENTS[kind]


def _key_problem(extra: set[str], missing: set[str]) -> str:
    parts = [f"unknown field(s) {short_repr(sorted(extra))}"] if extra else []
    return ", ".join(parts + ([f"missing field(s) {sorted(missing)}"] if missing else []))


def _field_value(kind: str, name: str, typ: str, v: Any, depth: int) -> Any:
    """Check one JSON field against its declared type (see :meth:`PrivacyEvent.from_json`)."""
    if name == "event":
        return PrivacyEvent.from_json(v, depth + 1)
    if name == "events":
        if not isinstance(v, list) or len(v) > MAX_COMPOSED_EVENTS:
            raise ValueError(f"{kind} event: 'events' must be a list of at most {MAX_COMPOSED_EVENTS} events")
        return tuple(PrivacyEvent.from_json(e, depth + 1) for e in v)
    if typ == "float":
        return finite_real(v, f"{kind} event: {name!r}")
    if typ == "int" and not (isinstance(v, int) and not isinstance(v, bool)):
        raise ValueError(f"{kind} event: {name!r} must be an integer, got {short_repr(v)}")
    if typ == "str" and not isinstance(v, str):
        raise ValueError(f"{kind} event: {name!r} must be a string, got {short_repr(v)}")
    return v


def check_positive(name: str, value: float) -> None:
    """Refuse a parameter that is not a positive finite real (a bool included)."""
    if isinstance(value, bool) or not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")


def check_relation(relation: str) -> None:
    """Refuse a neighbouring relation other than those of :data:`RELATIONS`."""
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
