"""One privacy ledger per run: declared plan, budget, composition, transcript, replay.

Composition is done with ``dp-accounting``'s privacy-loss distributions (PLD, Meiser &
Mohammadi 2018; Koskela et al. 2020; Doroshenko et al. 2022), built here event by event so
that every count is composed with ``self_compose`` (dp-accounting 0.6's PLD accountant
ignores the count of a self-composed randomized-response event; see the regression test).
A Rényi-DP figure is offered as an independent cross-check where dp-accounting's RDP
accountant supports the events (``rdp_epsilon``).

One neighbouring relation per ledger.  Unsupported combinations raise
:class:`UnsupportedEventError` naming the mechanism, never a silently wrong number.
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import dp_accounting
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from ..io import atomic_write_bytes
from .events import (
    RELATIONS,
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PublicDataEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
)

TRANSCRIPT_FORMAT = "sstq-fl-privacy-transcript"
TRANSCRIPT_VERSION = 1
PLD: TypeAlias = pld_lib.PrivacyLossDistribution


class UnsupportedEventError(ValueError):
    """The ledger cannot account for this event under its neighbouring relation."""


class BudgetExceededError(ValueError):
    """A declared plan would spend more than the user's budget."""


class PlanExceededError(ValueError):
    """A recorded event was not declared in the plan (or exceeds its declared count)."""


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


@dataclass
class Entry:
    event: PrivacyEvent
    count: int
    subset: str = "private"
    note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {"type": "event", "event": self.event.to_json(), "count": self.count, "subset": self.subset, "note": self.note}
        if self.meta:  # what a pipeline records about one execution (stage, bound, std, q, clients, ...)
            out["meta"] = self.meta
        return out

    def merges_with(self, event: PrivacyEvent, subset: str, note: str, meta: dict[str, Any] | None) -> bool:
        return not meta and not self.meta and self.event == event and self.subset == subset and self.note == note


def _neighbor_rel(relation: str) -> dp_accounting.NeighboringRelation:
    return {"replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
            "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE}[relation]


def amplified_pure_epsilon(epsilon: float, q: float) -> float:
    """``ε' = log(1 + q (e^ε − 1))``: a Poisson(q)-subsampled ε-DP mechanism is ε'-DP against
    an observer who does not learn whether the individual was sampled (Balle, Barthe &
    Gaboardi 2018, Thm. 8, by advanced joint convexity; for local randomizers it needs the
    absent individual's view to be that of a message on a public null input)."""
    return math.log1p(q * math.expm1(epsilon))


def event_pld(event: PrivacyEvent, relation: str, interval: float) -> PLD | None:
    """The PLD of ``event`` under ``relation``; ``None`` for a non-private event."""
    rel = _neighbor_rel(relation)
    if isinstance(event, PureDpEvent):
        if event.relation != relation:
            raise UnsupportedEventError(f"{event.kind} event holds under {event.relation}, but this ledger's relation is "
                                        f"{relation}")
        return pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(event.epsilon, 0.0), interval)
    if isinstance(event, RandomizedResponseEvent):
        if relation != "replace_one":
            raise UnsupportedEventError("randomized_response is accounted only under replace_one")
        return pld_lib.from_randomized_response(event.noise_parameter, event.num_buckets, value_discretization_interval=interval,
                                                neighboring_relation=rel)
    if isinstance(event, GaussianEvent):
        return pld_lib.from_gaussian_mechanism(event.noise_multiplier, value_discretization_interval=interval,
                                               neighboring_relation=rel)
    if isinstance(event, LaplaceEvent):
        _need_add_remove(event, relation)
        return pld_lib.from_laplace_mechanism(event.noise_multiplier, value_discretization_interval=interval)
    if isinstance(event, PoissonSampledEvent):
        return _sampled_pld(event, relation, interval)
    if isinstance(event, SelfComposedEvent):
        inner = event_pld(event.event, relation, interval)
        if event.count == 0:
            return pld_lib.identity(interval)
        return None if inner is None else inner.self_compose(event.count)
    if isinstance(event, ComposedEvent):
        return compose_plds((event_pld(e, relation, interval) for e in event.events), interval)
    if isinstance(event, PublicDataEvent):
        return pld_lib.identity(interval)
    if isinstance(event, NonPrivateEvent):
        return None
    raise UnsupportedEventError(f"the ledger cannot account for a {type(event).__name__} ({event.kind}) event")


def _need_add_remove(event: PrivacyEvent, relation: str) -> None:
    if relation != "add_or_remove_one":
        raise UnsupportedEventError(f"{event.kind} is accounted only under add_or_remove_one (ledger: {relation})")


def _sampled_pld(event: PoissonSampledEvent, relation: str, interval: float) -> PLD:
    q, inner = event.sampling_probability, event.event
    if isinstance(inner, GaussianEvent):
        return pld_lib.from_gaussian_mechanism(inner.noise_multiplier, value_discretization_interval=interval,
                                               sampling_prob=q, neighboring_relation=_neighbor_rel(relation))
    if isinstance(inner, LaplaceEvent):
        _need_add_remove(event, relation)
        return pld_lib.from_laplace_mechanism(inner.noise_multiplier, value_discretization_interval=interval,
                                              sampling_prob=q)
    if isinstance(inner, PureDpEvent):
        amplified = PureDpEvent(amplified_pure_epsilon(inner.epsilon, q), inner.relation)
        out = event_pld(amplified, relation, interval)
        assert out is not None
        return out
    raise UnsupportedEventError(f"Poisson subsampling of a {inner.kind} event is not supported by the ledger")


def compose_plds(plds: Iterable[PLD | None], interval: float) -> PLD | None:
    out = pld_lib.identity(interval)
    for p in plds:
        if p is None:
            return None
        out = out.compose(p)
    return out


def rdp_event(event: PrivacyEvent, relation: str) -> dp_accounting.DpEvent:
    """Map an event onto dp-accounting's RDP accountant (add/remove semantics), or refuse.

    Under replace_one a Gaussian's neighbouring outputs differ by ``2C``, so its RDP noise
    multiplier is halved; a pure ε-DP event is ``ε²/2``-zCDP (Bun & Steinke 2016)."""
    if isinstance(event, GaussianEvent):
        return dp_accounting.GaussianDpEvent(event.noise_multiplier / (2 if relation == "replace_one" else 1))
    if isinstance(event, PureDpEvent):
        return dp_accounting.ZCDpEvent(event.epsilon**2 / 2)
    if isinstance(event, PoissonSampledEvent) and relation == "add_or_remove_one":
        return dp_accounting.PoissonSampledDpEvent(event.sampling_probability, rdp_event(event.event, relation))
    if isinstance(event, SelfComposedEvent):
        return dp_accounting.SelfComposedDpEvent(rdp_event(event.event, relation), event.count)
    if isinstance(event, ComposedEvent):
        return dp_accounting.ComposedDpEvent([rdp_event(e, relation) for e in event.events])
    if isinstance(event, PublicDataEvent):
        return dp_accounting.NoOpDpEvent()
    raise UnsupportedEventError(f"no RDP cross-check for a {event.kind} event under {relation}")


def homogeneous_pure(entries: Sequence[Entry]) -> tuple[float, int] | None:
    """``(ε₀, k)`` when the entries are ``k`` runs of one pure ε₀-DP mechanism, else ``None``."""
    eps, k = None, 0
    for e in entries:
        ev = e.event
        if isinstance(ev, PublicDataEvent) or e.count == 0:
            continue
        if not isinstance(ev, PureDpEvent) or (eps is not None and ev.epsilon != eps):
            return None
        eps, k = ev.epsilon, k + e.count
    return (eps, k) if eps is not None else None


def pure_composition_delta(eps0: float, k: int, eps: float) -> float:
    """Exact ``δ(ε)`` of ``k``-fold composition of ε₀-DP (Kairouz, Oh & Viswanath 2015).

    The tight dominating pair is ``k``-fold binary randomized response: the privacy loss is
    ``L_j = ε₀ (k − 2j)`` with ``j ~ Bin(k, 1/(1+e^{ε₀}))``, and
    ``δ(ε) = Σ_{L_j > ε} P(j) (1 − e^{ε − L_j})``.
    """
    import numpy as np
    from scipy import stats

    j = np.arange(k + 1)
    loss = eps0 * (k - 2 * j)
    logp = stats.binom.logpmf(j, k, 1 / (1 + math.exp(eps0)))
    m = loss > eps
    return float(np.sum(np.exp(logp[m]) * -np.expm1(eps - loss[m])))


def pure_composition_epsilon(eps0: float, k: int, delta: float) -> float:
    """Smallest ε with ``δ(ε) ≤ delta`` for ``k``-fold ε₀-DP composition (bisection, 1e-12)."""
    if k == 0:
        return 0.0
    lo, hi = 0.0, eps0 * k
    if pure_composition_delta(eps0, k, 0.0) <= delta:
        return 0.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if pure_composition_delta(eps0, k, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def _planned_counts(plan: Sequence[tuple[PrivacyEvent, int]]) -> dict[PrivacyEvent, int]:
    counts: dict[PrivacyEvent, int] = {}
    for ev, n in plan:
        counts[ev] = counts.get(ev, 0) + n
    return counts


@dataclass
class PrivacyLedger:
    """All privacy events of one run, under one neighbouring relation.

    Typical use: ``ledger.start(plan, Budget(ε, δ))`` before any private computation (it
    refuses a plan that exceeds the budget), ``ledger.record(event, count)`` as mechanisms
    run (refused if the plan did not declare it), ``ledger.epsilon(δ)`` for the spend so far,
    and ``ledger.write_transcript(path)`` at checkpoints and at the end.
    """

    relation: str = "replace_one"
    discretization: float = 1e-4
    entries: list[Entry] = field(default_factory=list)
    plan: list[tuple[PrivacyEvent, int]] | None = None
    budget: Budget | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        if not 0 < self.discretization <= 0.1:
            raise ValueError(f"discretization interval must be in (0, 0.1], got {self.discretization}")
        self._cache: tuple[int, PLD | None] | None = None
        self._supported: set[PrivacyEvent] = set()
        self._used: dict[PrivacyEvent, int] = {}

    def _validate(self, event: PrivacyEvent) -> None:
        """Refuse an event the ledger cannot account for (checked once per distinct event)."""
        if event not in self._supported:
            event_pld(event, self.relation, self.discretization)
            self._supported.add(event)

    # ------------------------------------------------------------------ planning
    def start(self, plan: Sequence[tuple[PrivacyEvent, int]], budget: Budget | None = None) -> float:
        """Declare the whole run; returns its planned ε (at the budget's δ, or 1e-5)."""
        if self.entries:
            raise ValueError("a plan must be declared before any event is recorded")
        for ev, n in plan:
            if not (isinstance(n, int) and n >= 0):
                raise ValueError(f"planned count must be a non-negative integer, got {n!r}")
            self._validate(ev)  # refuse unsupported events now
        planned = PrivacyLedger(self.relation, self.discretization, [Entry(ev, n) for ev, n in plan])
        delta = budget.delta if budget else 1e-5
        spend = planned.epsilon(delta)
        if budget is not None and spend > budget.epsilon:
            raise BudgetExceededError(f"the planned run spends epsilon={spend:.4g} at delta={delta:g}, which exceeds the "
                                      f"budget epsilon={budget.epsilon:g} at delta={budget.delta:g}")
        self.plan, self.budget = list(plan), budget
        return spend

    def planned_epsilon(self, delta: float) -> float:
        if self.plan is None:
            raise ValueError("no plan was declared")
        return PrivacyLedger(self.relation, self.discretization, [Entry(ev, n) for ev, n in self.plan]).epsilon(delta)

    # ------------------------------------------------------------------ recording
    def record(self, event: PrivacyEvent, count: int = 1, subset: str = "private", note: str = "",
               meta: dict[str, Any] | None = None) -> None:
        """Charge ``count`` runs of ``event`` (validated now, refused if unsupported or unplanned).

        ``meta`` (JSON-able) describes this execution in the transcript (one line each).
        """
        if not (isinstance(count, int) and count >= 0):
            raise ValueError(f"count must be a non-negative integer, got {count!r}")
        last = self.entries[-1] if self.entries else None
        if self.plan is None and last is not None and last.event is event and last.merges_with(event, subset, note, meta):
            last.count += count  # fast path: the same event object again (e.g. every DP-SGD step)
            self._used[event] = self._used.get(event, 0) + count
            self._cache = None
            return
        self._validate(event)
        used = self._used.get(event, 0)
        if self.plan is not None:
            allowed = _planned_counts(self.plan).get(event, 0)
            if used + count > allowed:
                raise PlanExceededError(f"recording {count} more {event.kind} event(s) {event.to_json()} exceeds the "
                                        f"declared plan ({used} of {allowed} used)")
        self._used[event] = used + count
        if last is not None and last.merges_with(event, subset, note, meta):
            last.count += count
        else:
            self.entries.append(Entry(event, count, subset, note, dict(meta or {})))
        self._cache = None

    # ------------------------------------------------------------------ queries
    def _pld(self) -> PLD | None:
        key = sum(e.count for e in self.entries) * 1_000_003 + len(self.entries)
        if self._cache is None or self._cache[0] != key:
            counts: dict[PrivacyEvent, int] = {}  # composition commutes: one self-composition per distinct event
            for e in self.entries:
                counts[e.event] = counts.get(e.event, 0) + e.count
            plds = (event_pld(SelfComposedEvent(ev, n), self.relation, self.discretization) for ev, n in counts.items())
            self._cache = (key, compose_plds(plds, self.discretization))
        return self._cache[1]

    def epsilon(self, delta: float) -> float:
        """Smallest ε such that the composition so far is (ε, δ)-DP (``inf`` if non-private).

        A ledger holding only one pure-ε mechanism (an LDP training run) is answered by the
        exact optimal-composition formula (:func:`pure_composition_epsilon`, no
        discretisation, ``O(k)``); anything else by the PLD accountant.
        """
        if not 0 <= delta < 1:
            raise ValueError(f"delta must be in [0, 1), got {delta}")
        homo = homogeneous_pure(self.entries)
        if homo is not None:
            return pure_composition_epsilon(homo[0], homo[1], delta)
        p = self._pld()
        return math.inf if p is None else max(0.0, float(p.get_epsilon_for_delta(delta)))

    def delta(self, epsilon: float) -> float:
        """Smallest δ such that the composition so far is (ε, δ)-DP."""
        homo = homogeneous_pure(self.entries)
        if homo is not None:
            return pure_composition_delta(homo[0], homo[1], epsilon)
        p = self._pld()
        return 1.0 if p is None else float(p.get_delta_for_epsilon(epsilon))

    def rdp_epsilon(self, delta: float) -> float | None:
        """Independent RDP figure for the same events, or ``None`` where unsupported."""
        acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
        try:
            for e in self.entries:
                acc.compose(rdp_event(e.event, self.relation), e.count)
        except (UnsupportedEventError, ValueError):
            return None
        return float(acc.get_epsilon(delta))

    def basic_epsilon(self) -> float:
        """Basic composition ``Σ ε_i`` for pure-ε events (``None`` semantics: ``inf`` otherwise)."""
        total = 0.0
        for e in self.entries:
            ev = e.event
            if isinstance(ev, PureDpEvent):
                total += e.count * ev.epsilon
            elif isinstance(ev, PublicDataEvent):
                continue
            else:
                return math.inf
        return total

    def report(self, delta: float) -> dict[str, Any]:
        out: dict[str, Any] = {"relation": self.relation, "delta": delta, "epsilon": self.epsilon(delta),
                               "accountant": "pure-kov" if homogeneous_pure(self.entries) is not None else "pld",
                               "epsilon_rdp_crosscheck": self.rdp_epsilon(delta),
                               "events": sum(e.count for e in self.entries)}
        if self.plan is not None:
            out["planned_epsilon"] = self.planned_epsilon(delta)
            out["stopped_early"] = sum(e.count for e in self.entries) < sum(n for _, n in self.plan)
        return out

    # ------------------------------------------------------------------ transcripts
    def header(self) -> dict[str, Any]:
        from .. import __version__

        return {"type": "header", "format": TRANSCRIPT_FORMAT, "version": TRANSCRIPT_VERSION,
                "relation": self.relation, "discretization": self.discretization,
                "libraries": {"sstq_fl": __version__, "dp_accounting": _dp_accounting_version(),
                              "python": platform.python_version()},
                "budget": None if self.budget is None else {"epsilon": self.budget.epsilon, "delta": self.budget.delta},
                "plan": None if self.plan is None else [{"event": ev.to_json(), "count": n} for ev, n in self.plan],
                "notes": self.notes}

    def transcript_lines(self, delta: float | None = None) -> list[dict[str, Any]]:
        lines = [self.header(), *(e.to_json() for e in self.entries)]
        if delta is not None:
            lines.append({"type": "summary", **self.report(delta)})
        return lines

    def write_transcript(self, path: str | Path, delta: float | None = None) -> None:
        """Write the JSON Lines transcript atomically (header, events, optional summary)."""
        text = "".join(json.dumps(line, sort_keys=True, allow_nan=True) + "\n" for line in self.transcript_lines(delta))
        atomic_write_bytes(path, text.encode())

    @classmethod
    def from_transcript(cls, path: str | Path) -> tuple[PrivacyLedger, dict[str, Any] | None]:
        """Rebuild a ledger from a transcript alone; returns it and the recorded summary (if any)."""
        lines = [json.loads(s) for s in Path(path).read_text().splitlines() if s.strip()]
        if not lines or lines[0].get("type") != "header" or lines[0].get("format") != TRANSCRIPT_FORMAT:
            raise ValueError(f"{path} is not an sstq-fl privacy transcript (missing header)")
        head = lines[0]
        if head.get("version") != TRANSCRIPT_VERSION:
            raise ValueError(f"unsupported transcript version {head.get('version')}")
        led = cls(head["relation"], head["discretization"], notes=head.get("notes") or {})
        if head.get("plan") is not None:
            led.plan = [(PrivacyEvent.from_json(p["event"]), int(p["count"])) for p in head["plan"]]
        if head.get("budget"):
            led.budget = Budget(head["budget"]["epsilon"], head["budget"]["delta"])
        summary = None
        for line in lines[1:]:
            if line.get("type") == "event":
                entry = Entry(PrivacyEvent.from_json(line["event"]), int(line["count"]), line.get("subset", "private"),
                              line.get("note", ""), dict(line.get("meta") or {}))
                led._validate(entry.event)
                led.entries.append(entry)
            elif line.get("type") == "summary":
                summary = line
            else:
                raise ValueError(f"unknown transcript line type {line.get('type')!r}")
        return led, summary


def _dp_accounting_version() -> str:
    from importlib import metadata

    return metadata.version("dp-accounting")
