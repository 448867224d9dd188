"""Privacy events: small immutable records whose meaning never changes once written.

Each event states exactly which mechanism was run, with which parameters; the neighbouring
relation is the ledger's (one per ledger), except for the pure-ε events that state the
relation their guarantee holds under.  Events serialise to JSON (``to_json``/``from_json``)
so that a transcript can be replayed without any code but this module.  New kinds are
added, never changed: a transcript written today must replay to the same number tomorrow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

RELATIONS = ("replace_one", "add_or_remove_one")
MAX_EVENT_DEPTH = 16  # nesting of event objects accepted by from_json (poisson_sampled of self_composed of ...)
MAX_COMPOSED_EVENTS = 1000  # events in one composed event accepted by from_json
MAX_BUCKETS = 2**53  # randomized response: more buckets than a float64 counts exactly are refused
EXP_SAFE = 700.0  # math.exp(x) is finite for x <= 709.78; above EXP_SAFE formulas switch to e^{-x} forms
_KINDS: dict[str, type[PrivacyEvent]] = {}


def _kind(name: str):  # type: ignore[no-untyped-def]
    def deco(cls: type[PrivacyEvent]) -> type[PrivacyEvent]:
        cls.kind = name
        _KINDS[name] = cls
        return cls

    return deco


@dataclass(frozen=True)
class PrivacyEvent:
    kind: ClassVar[str] = "abstract"

    def to_json(self) -> dict[str, Any]:
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
        raise ValueError(f"not a privacy event (an object with a 'kind'): {_short(obj)}")
    kind = obj["kind"]
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValueError(f"unknown privacy event kind {_short(kind)}; known: {sorted(_KINDS)}")
    return _KINDS[kind]


def _key_problem(extra: set[str], missing: set[str]) -> str:
    parts = [f"unknown field(s) {_short(sorted(extra))}"] if extra else []
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
        raise ValueError(f"{kind} event: {name!r} must be an integer, got {_short(v)}")
    if typ == "str" and not isinstance(v, str):
        raise ValueError(f"{kind} event: {name!r} must be a string, got {_short(v)}")
    return v


def finite_real(v: Any, what: str) -> float:
    """``v`` as a finite float if it is a JSON number (an ``int`` or ``float``, never a ``bool``)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{what} must be a number, got {_short(v)}")
    try:
        out = float(v)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ValueError(f"{what} must be finite, got {_short(v)}")
    return out


def _short(v: Any, limit: int = 60) -> str:
    """``repr(v)`` cut to ``limit`` characters (error messages stay one short line)."""
    try:
        r = repr(v)
    except (RecursionError, ValueError):  # very deep containers; ints beyond str()'s digit limit
        r = f"<{type(v).__name__}>"
    return r if len(r) <= limit else r[: limit - 3] + "..."


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")


@_kind("pure_dp")
@dataclass(frozen=True)
class PureDpEvent(PrivacyEvent):
    """One release of a pure ``ε``-DP mechanism: for all neighbouring inputs ``x, x'`` and all
    output sets ``S``, ``P[M(x) ∈ S] ≤ e^ε P[M(x') ∈ S]``.

    An LDP message is this event with ``relation='replace_one'`` over the client's whole
    vector (any two inputs in the public ball are neighbours).  Its privacy-loss
    distribution is that of binary randomized response with parameter ``ε``, the tight
    dominating pair of every ε-DP mechanism.
    """

    epsilon: float
    relation: str = "replace_one"

    def __post_init__(self) -> None:
        _positive("epsilon", self.epsilon)
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")


@_kind("exponential_mechanism")
@dataclass(frozen=True)
class ExponentialMechanismEvent(PureDpEvent):
    """The exponential mechanism with utility sensitivity ``Δu`` run at ``ε``: it selects ``r``
    with probability ``∝ exp(ε u(x, r) / (2 Δu))`` and is pure ``ε``-DP (McSherry & Talwar
    2007); composed as a pure-ε event (dp-accounting 0.6 has no event for it).
    """


@_kind("randomized_response")
@dataclass(frozen=True)
class RandomizedResponseEvent(PrivacyEvent):
    """``k``-ary randomized response in dp-accounting's parametrisation: with probability
    ``1 − noise_parameter`` report the true bucket, otherwise a uniformly random bucket
    (possibly the true one).  Flat ``M``-ary RR with keep probability ``e^ε/(e^ε+M−1)`` is
    ``noise_parameter = M/(e^ε+M−1)``.  Defined under ``replace_one`` only.
    """

    noise_parameter: float
    num_buckets: int

    def __post_init__(self) -> None:
        if isinstance(self.noise_parameter, bool) or not 0 < self.noise_parameter <= 1:
            raise ValueError(f"noise_parameter must be in (0, 1], got {self.noise_parameter!r}")
        if not (isinstance(self.num_buckets, int) and not isinstance(self.num_buckets, bool)
                and 2 <= self.num_buckets <= MAX_BUCKETS):
            raise ValueError(f"num_buckets must be an integer in [2, 2**53], got {self.num_buckets!r}")

    @staticmethod
    def flat(epsilon: float, buckets: int) -> RandomizedResponseEvent:
        """Flat ``M``-ary RR at ``ε``: ``noise_parameter = M/(e^ε+M−1)`` (``= M e^{−ε}/(1+(M−1)e^{−ε})``
        above :data:`EXP_SAFE`; refused once it underflows to 0, i.e. for ε beyond about 745)."""
        if epsilon <= EXP_SAFE:
            return RandomizedResponseEvent(buckets / (math.exp(epsilon) + buckets - 1), buckets)
        t = math.exp(-epsilon)
        noise = buckets * t / (1 + (buckets - 1) * t)
        if not noise > 0:
            raise ValueError(f"flat randomized response at epsilon={epsilon:g} flips with a probability below the "
                             f"smallest float64 (supported: epsilon up to about 745)")
        return RandomizedResponseEvent(noise, buckets)


def flat_rr_probabilities(epsilon: float, m: int) -> tuple[float, float]:
    """Keep and per-other-label probabilities ``(p, q)`` of flat ``m``-ary randomized response.

    ``p = e^ε/(e^ε+m−1)``, ``q = 1/(e^ε+m−1)`` (so ``p/q = e^ε``).  Above :data:`EXP_SAFE`,
    where ``e^ε`` overflows, the same values are computed as ``1/(1+(m−1)e^{−ε})`` and
    ``e^{−ε}/(1+(m−1)e^{−ε})``; below it the formula is the original one, bit for bit.
    """
    if epsilon <= EXP_SAFE:
        e = math.exp(epsilon)
        return e / (e + m - 1), 1.0 / (e + m - 1)
    t = math.exp(-epsilon)
    return 1.0 / (1.0 + (m - 1) * t), t / (1.0 + (m - 1) * t)


@_kind("gaussian")
@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """The Gaussian mechanism ``f(x) + N(0, σ² C² I)`` for an ``f`` whose per-record
    contribution is bounded by ``C`` in L2 norm; ``noise_multiplier = σ``.  Under
    ``replace_one`` neighbouring outputs differ by up to ``2C`` (dp-accounting doubles the
    sensitivity internally); under ``add_or_remove_one`` by ``C``.
    """

    noise_multiplier: float

    def __post_init__(self) -> None:
        _positive("noise_multiplier", self.noise_multiplier)


@_kind("laplace")
@dataclass(frozen=True)
class LaplaceEvent(PrivacyEvent):
    """The Laplace mechanism with scale ``b = noise_multiplier · Δ₁`` (``add_or_remove_one`` only)."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        _positive("noise_multiplier", self.noise_multiplier)


@_kind("poisson_sampled")
@dataclass(frozen=True)
class PoissonSampledEvent(PrivacyEvent):
    """``event`` run on a Poisson subsample: each record (or client) is included
    independently with probability ``sampling_probability``.  Amplification assumes the
    observer does not learn who was included.
    """

    sampling_probability: float
    event: PrivacyEvent

    def __post_init__(self) -> None:
        if isinstance(self.sampling_probability, bool) or not 0 < self.sampling_probability <= 1:
            raise ValueError(f"sampling_probability must be in (0, 1], got {self.sampling_probability!r}")


@_kind("self_composed")
@dataclass(frozen=True)
class SelfComposedEvent(PrivacyEvent):
    """``event`` run ``count`` times on the same data (adaptive composition)."""

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and not isinstance(self.count, bool) and self.count >= 0):
            raise ValueError(f"count must be a non-negative integer, got {self.count!r}")


@_kind("composed")
@dataclass(frozen=True)
class ComposedEvent(PrivacyEvent):
    """Every event in ``events`` run once, in order, on the same data."""

    events: tuple[PrivacyEvent, ...]


@_kind("non_private")
@dataclass(frozen=True)
class NonPrivateEvent(PrivacyEvent):
    """A release with no privacy guarantee (``ε = ∞``), e.g. the ``clean`` reference encoder."""

    reason: str = "no randomization"


@_kind("public")
@dataclass(frozen=True)
class PublicDataEvent(PrivacyEvent):
    """A computation on public data only (no privacy cost); recorded so the transcript says so."""

    description: str = ""
