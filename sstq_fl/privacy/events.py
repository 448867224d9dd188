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
    def from_json(obj: dict[str, Any]) -> PrivacyEvent:
        """Rebuild an event from :meth:`to_json` output (refusing unknown kinds)."""
        if not isinstance(obj, dict) or "kind" not in obj:
            raise ValueError(f"not a privacy event: {obj!r}")
        kind = obj["kind"]
        if kind not in _KINDS:
            raise ValueError(f"unknown privacy event kind {kind!r}; known: {sorted(_KINDS)}")
        cls = _KINDS[kind]
        args: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in obj:
                continue
            v = obj[f.name]
            if f.name == "event":
                v = PrivacyEvent.from_json(v)
            elif f.name == "events":
                v = tuple(PrivacyEvent.from_json(e) for e in v)
            args[f.name] = v
        return cls(**args)


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
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
        if not 0 < self.noise_parameter <= 1:
            raise ValueError(f"noise_parameter must be in (0, 1], got {self.noise_parameter!r}")
        if not (isinstance(self.num_buckets, int) and self.num_buckets >= 2):
            raise ValueError(f"num_buckets must be an integer >= 2, got {self.num_buckets!r}")

    @staticmethod
    def flat(epsilon: float, buckets: int) -> RandomizedResponseEvent:
        return RandomizedResponseEvent(buckets / (math.exp(epsilon) + buckets - 1), buckets)


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
        if not 0 < self.sampling_probability <= 1:
            raise ValueError(f"sampling_probability must be in (0, 1], got {self.sampling_probability!r}")


@_kind("self_composed")
@dataclass(frozen=True)
class SelfComposedEvent(PrivacyEvent):
    """``event`` run ``count`` times on the same data (adaptive composition)."""

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and self.count >= 0):
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
