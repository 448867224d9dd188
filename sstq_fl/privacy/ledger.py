"""One privacy ledger per run: declared plan, budget, composition, and its transcript.

Every private computation of a run is recorded as a :class:`~sstq_fl.privacy.events.PrivacyEvent`
in one ledger, under one neighbouring relation.  ε is composed with dp-accounting's
privacy-loss distributions (PLD; Meiser & Mohammadi, CCS 2018; Koskela, Jälkö & Honkela,
AISTATS 2020; Doroshenko et al., PETS 2022), each distinct event's PLD built by the event itself
and self-composed once per its count (dp-accounting 0.6's PLD accountant ignores the count of a
self-composed randomized-response event).  A ledger holding only one
pure-ε mechanism is answered by the exact optimal composition instead
(:mod:`sstq_fl.privacy.pure_composition`), and a Rényi-DP figure is offered as an independent
cross-check where the events have one (:mod:`sstq_fl.privacy.rdp`).  A ledger holding an event published as
an RDP bound alone (``accounted_by = "rdp"``: the distributed discrete Gaussian and Skellam sums of secure
aggregation) is composed by RDP instead, every event by its curve (:func:`~sstq_fl.privacy.rdp.curve_epsilon`).

Unsupported events raise :class:`UnsupportedEventError` naming the mechanism, never a silently
wrong number.  Limits (each refused with a one-line :class:`AccountingLimitError`): at most
:data:`~sstq_fl.privacy.errors.MAX_EVENTS` mechanism executions per ledger (an event's
:meth:`~sstq_fl.privacy.events.PrivacyEvent.weight` times its count), and the PLD size limits of
:mod:`sstq_fl.privacy.pld`, for one composition and for validating a ledger's distinct events.

:meth:`PrivacyLedger.from_transcript` rebuilds a ledger from its transcript
(:mod:`sstq_fl.privacy.transcript`) exactly as :meth:`PrivacyLedger.record` would have built it;
:meth:`PrivacyLedger.from_prefix` rebuilds it as it stood at a hash-chained prefix of it (a resumed
run), and keeps that prefix's lines verbatim, so the transcript it then writes only appends to them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import (
    MAX_EVENTS,
    AccountingLimitError,
    Budget,
    BudgetExceededError,
    PlanExceededError,
    TranscriptError,
    check_count,
    short_repr,
)
from .events import PrivacyEvent, SelfComposedEvent
from .events.base import check_relation
from .pld import PLD, compose_plds, work_budget
from .pure_composition import pure_composition_delta, pure_composition_epsilon
from .rdp import composed_curve, curve_delta, curve_epsilon
from .rdp import rdp_epsilon as _rdp_epsilon
from .transcript import (
    CHAINED_FROM,
    Entry,
    ParsedTranscript,
    chained_texts,
    check_summary,
    epsilon_close,
    header_line,
    line_hash,
    parse_entry,
    parse_transcript,
    read_limited,
    where,
    write_texts,
)


def homogeneous_pure(entries: Iterable[Entry]) -> tuple[float, int] | None:
    """``(ε₀, k)`` when the entries are ``k`` runs of one pure ε₀-DP mechanism (events revealing
    nothing private aside), else ``None``."""
    eps, k = None, 0
    for e in entries:
        pure = e.event.pure_epsilon() if e.count else 0.0
        if pure is None:
            return None
        if pure == 0:
            continue
        if eps is not None and pure != eps:
            return None
        eps, k = pure, k + e.count
    return (eps, k) if eps is not None else None


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
    ``ledger.write_transcript(path)`` at checkpoints, and ``ledger.mark_complete()`` before
    the final transcript (a plan with fewer recorded events than declared is then a completed
    run with client sampling, not an early stop).  ``run_id`` (kept in ``notes["run_id"]``)
    names the run in the transcript's header and summary.
    """

    relation: str = "replace_one"
    discretization: float = 1e-4
    entries: list[Entry] = field(default_factory=list)
    plan: list[tuple[PrivacyEvent, int]] | None = None
    budget: Budget | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    complete: bool = False

    def __post_init__(self) -> None:
        check_relation(self.relation)
        if isinstance(self.discretization, bool) or not 0 < self.discretization <= 0.1:
            raise ValueError(f"discretization interval must be in (0, 0.1], got {self.discretization}")
        self._cache: tuple[int, PLD | None] | None = None
        self._supported: dict[PrivacyEvent, int] = {}  # accountable events and their weights
        self._used: dict[PrivacyEvent, int] = {}
        self._executions = sum(e.count * e.event.weight() for e in self.entries)
        self._allowed: dict[PrivacyEvent, int] = {}
        self._planned: PrivacyLedger | None = None
        self._validation_work = [0.0]
        self._prefix: list[str] = []  # a resumed run's transcript lines, kept verbatim (header first)
        self._prefix_entries = 0  # how many of ``entries`` those lines hold (never merged into)

    @property
    def run_id(self) -> str | None:
        """The run's id (``notes["run_id"]``), or ``None`` when the run has none."""
        rid = self.notes.get("run_id")
        return rid if isinstance(rid, str) else None

    @run_id.setter
    def run_id(self, value: str) -> None:
        if not (isinstance(value, str) and value):
            raise ValueError(f"run_id must be a non-empty string, got {value!r}")
        self.notes["run_id"] = value

    def mark_complete(self) -> None:
        """The run finished: no event is recorded after this, and the summary says ``stopped_early: false``."""
        self.complete = True

    def _validate(self, event: PrivacyEvent) -> int:
        """Refuse an event the ledger cannot account for; its weight (checked once per distinct event)."""
        if event not in self._supported:
            weight = event.weight()
            if weight > MAX_EVENTS:
                raise AccountingLimitError(f"one {event.kind} event stands for {weight} mechanism executions "
                                           f"(limit {MAX_EVENTS})")
            with work_budget(self._validation_work):  # all distinct events together
                event.validate(self.relation, self.discretization)
            self._supported[event] = weight
        return self._supported[event]

    # ------------------------------------------------------------------ planning
    def start(self, plan: Sequence[tuple[PrivacyEvent, int]], budget: Budget | None = None) -> float:
        """Declare the whole run; returns its planned ε (at the budget's δ, or 1e-5)."""
        if self.entries:
            raise ValueError("a plan must be declared before any event is recorded")
        total = 0
        for ev, n in plan:
            total += check_count(n, "planned count") * self._validate(ev)  # refuse unsupported events now
        if total > MAX_EVENTS:
            raise AccountingLimitError(f"the plan declares {total} mechanism executions (limit {MAX_EVENTS})")
        planned = PrivacyLedger(self.relation, self.discretization, [Entry(ev, n) for ev, n in plan])
        delta = budget.delta if budget else 1e-5
        spend = planned.epsilon(delta)
        if budget is not None and spend > budget.epsilon:
            raise BudgetExceededError(f"the planned run spends epsilon={spend:.4g} at delta={delta:g}, which exceeds the "
                                      f"budget epsilon={budget.epsilon:g} at delta={budget.delta:g}")
        self._set_plan(list(plan), budget)
        self._planned = planned
        return spend

    def _set_plan(self, plan: list[tuple[PrivacyEvent, int]], budget: Budget | None) -> None:
        self.plan, self.budget = plan, budget
        self._allowed = _planned_counts(plan)
        self._planned = None

    def planned_epsilon(self, delta: float) -> float:
        if self.plan is None:
            raise ValueError("no plan was declared")
        if self._planned is None:  # cached: its PLD is built once
            self._planned = PrivacyLedger(self.relation, self.discretization, [Entry(ev, n) for ev, n in self.plan])
        return self._planned.epsilon(delta)

    # ------------------------------------------------------------------ recording
    def record(self, event: PrivacyEvent, count: int = 1, subset: str = "private", note: str = "",
               meta: dict[str, Any] | None = None) -> None:
        """Charge ``count`` runs of ``event`` (validated now, refused if unsupported or unplanned).

        ``meta`` (JSON-able) describes this execution in the transcript (one line each).  A
        zero count charges nothing and writes no line.
        """
        check_count(count)
        if self.complete:
            raise ValueError("the run was marked complete; no further event can be recorded")
        last = self.entries[-1] if len(self.entries) > self._prefix_entries else None
        if self.plan is None and last is not None and last.event is event and last.merges_with(event, subset, note, meta):
            self._charge(event, count, self._validate(event))  # fast path: the same event object (every DP-SGD step)
            last.count += count
            self._cache = None
            return
        self._charge(event, count, self._validate(event))
        if count == 0:
            return
        if last is not None and last.merges_with(event, subset, note, meta):
            last.count += count
        else:
            self.entries.append(Entry(event, count, subset, note, dict(meta or {})))
        self._cache = None

    def _charge(self, event: PrivacyEvent, count: int, weight: int) -> None:
        """Check ``count`` more runs of ``event`` against the plan and :data:`MAX_EVENTS`, then count them."""
        used = self._used.get(event, 0)
        if self.plan is not None and used + count > self._allowed.get(event, 0):
            raise PlanExceededError(f"recording {count} more {event.kind} event(s) {event.to_json()} exceeds the "
                                    f"declared plan ({used} of {self._allowed.get(event, 0)} used)")
        if self._executions + count * weight > MAX_EVENTS:
            raise AccountingLimitError(f"recording {count} more {event.kind} event(s) takes the ledger past "
                                       f"{MAX_EVENTS} mechanism executions")
        self._used[event] = used + count
        self._executions += count * weight

    # ------------------------------------------------------------------ queries
    def _pld(self) -> PLD | None:
        key = sum(e.count for e in self.entries) * 1_000_003 + len(self.entries)
        if self._cache is None or self._cache[0] != key:
            counts: dict[PrivacyEvent, int] = {}  # composition commutes: one self-composition per distinct event
            for e in self.entries:
                counts[e.event] = counts.get(e.event, 0) + e.count
            plds = (SelfComposedEvent(ev, n).pld(self.relation, self.discretization) for ev, n in counts.items())
            with work_budget([0.0]):
                self._cache = (key, compose_plds(plds, self.discretization))
        return self._cache[1]

    def _by_rdp(self) -> bool:
        """Whether an entry's event is accounted by its RDP curve alone: then the whole ledger is composed by RDP."""
        return any(e.count and e.event.accounted_by == "rdp" for e in self.entries)

    def _curve(self) -> np.ndarray:
        """The composed RDP curve of the entries (an event without one refuses, naming itself)."""
        counts: dict[PrivacyEvent, int] = {}
        for e in self.entries:
            counts[e.event] = counts.get(e.event, 0) + e.count
        return composed_curve(counts.items(), self.relation)

    def _reveals_nothing(self) -> bool:
        """No entry, or only entries that reveal nothing private (pure ε = 0, or a count of 0): the
        composition is the identity, ``(0, 0)``-DP, with no PLD to build."""
        return all(e.count == 0 or e.event.pure_epsilon() == 0 for e in self.entries)

    def epsilon(self, delta: float) -> float:
        """Smallest ε such that the composition so far is (ε, δ)-DP (``inf`` if non-private).

        A ledger holding only one pure-ε mechanism (an LDP training run) is answered by the
        exact optimal-composition formula (:func:`pure_composition_epsilon`, no
        discretisation, ``O(k)``); anything else by the PLD accountant.
        """
        if not 0 <= delta < 1:
            raise ValueError(f"delta must be in [0, 1), got {delta}")
        if self._reveals_nothing():
            return 0.0
        homo = homogeneous_pure(self.entries)
        if homo is not None:
            return pure_composition_epsilon(homo[0], homo[1], delta)
        if self._by_rdp():
            return curve_epsilon(self._curve(), delta)
        p = self._pld()
        return math.inf if p is None else max(0.0, float(p.get_epsilon_for_delta(delta)))

    def delta(self, epsilon: float) -> float:
        """Smallest δ such that the composition so far is (ε, δ)-DP."""
        if epsilon >= 0 and self._reveals_nothing():
            return 0.0
        homo = homogeneous_pure(self.entries)
        if homo is not None:
            return pure_composition_delta(homo[0], homo[1], epsilon)
        if self._by_rdp():
            return curve_delta(self._curve(), epsilon)
        p = self._pld()
        return 1.0 if p is None else float(p.get_delta_for_epsilon(epsilon))

    def accountant(self) -> str:
        """Which composition answers :meth:`epsilon`: ``pure-kov``, ``rdp`` or ``pld``."""
        if homogeneous_pure(self.entries) is not None:
            return "pure-kov"
        return "rdp" if self._by_rdp() else "pld"

    def rdp_epsilon(self, delta: float) -> float | None:
        """Independent RDP figure for the same events, or ``None`` where unsupported."""
        if self._reveals_nothing():
            return 0.0
        return _rdp_epsilon(((e.event, e.count) for e in self.entries), self.relation, delta)

    def basic_epsilon(self) -> float:
        """Basic composition ``Σ ε_i`` for pure-ε events (``None`` semantics: ``inf`` otherwise)."""
        total = 0.0
        for e in self.entries:
            pure = e.event.pure_epsilon()
            if pure is None:
                return math.inf
            if pure:
                total += e.count * pure
        return total

    def report(self, delta: float) -> dict[str, Any]:
        """The spend at ``delta``, and the run's status: ``stopped_early`` is true when a plan was
        declared and the run was not marked complete (a checkpoint written mid-run)."""
        out: dict[str, Any] = {"relation": self.relation, "delta": delta, "epsilon": self.epsilon(delta),
                               "accountant": self.accountant(),
                               "epsilon_rdp_crosscheck": self.rdp_epsilon(delta),
                               "events": sum(e.count for e in self.entries), "run_id": self.run_id,
                               "complete": self.complete, "stopped_early": self.plan is not None and not self.complete}
        if self.plan is not None:
            out["planned_epsilon"] = self.planned_epsilon(delta)
        return out

    # ------------------------------------------------------------------ transcripts
    def header(self) -> dict[str, Any]:
        return header_line(self.relation, self.discretization, self.budget, self.plan, self.notes)

    def transcript_lines(self, delta: float | None = None) -> list[dict[str, Any]]:
        lines = [self.header(), *(e.to_json() for e in self.entries)]
        if delta is not None:
            lines.append({"type": "summary", **self.report(delta)})
        return lines

    def transcript_texts(self, delta: float | None = None) -> list[str]:
        """The transcript's lines, hash-chained: a resumed run's prefix verbatim, then the events
        recorded since, then (with ``delta``) the summary."""
        texts = chained_texts([e.to_json() for e in self.entries[self._prefix_entries:]],
                              self._prefix or chained_texts([self.header()]))
        return texts if delta is None else chained_texts([{"type": "summary", **self.report(delta)}], texts)

    def chain_head(self) -> dict[str, Any]:
        """``{"lines", "sha256"}``: how many lines the transcript has before its summary and the hash of
        the last of them, which commits to all of them (a checkpoint names its transcript by it)."""
        texts = self.transcript_texts()
        return {"lines": len(texts), "sha256": line_hash(texts[-1])}

    def write_transcript(self, path: str | Path, delta: float | None = None) -> str:
        """Write the JSON Lines transcript atomically; return the sha256 (hex) of the bytes written.

        The summary line is always written, at ``delta`` (default: the budget's δ, else 1e-5):
        a transcript without it reads as truncated."""
        if delta is None:
            delta = self.budget.delta if self.budget is not None else 1e-5
        return write_texts(path, self.transcript_texts(delta))

    @classmethod
    def from_transcript(cls, path: str | Path) -> tuple[PrivacyLedger, dict[str, Any]]:
        """Rebuild a ledger from a transcript alone; returns it and the recorded summary.

        Strict: anything malformed or inconsistent raises :class:`TranscriptError` (see
        :mod:`sstq_fl.privacy.transcript`); the plan and the limits are enforced as by
        :meth:`record`, and the composition is checked against the accounting limits, so that
        ``epsilon`` at any δ then answers."""
        try:
            parsed = parse_transcript(read_limited(path), str(path))
            led = cls(parsed.relation, parsed.discretization, notes=parsed.notes)
            led._set_plan_from(parsed)
            for lineno, obj in parsed.events:
                led._admit(parse_entry(obj, where(parsed.path, lineno)), where(parsed.path, lineno))
            led._check_summary(parsed)
            led._check_accountable(parsed)
        except (RecursionError, MemoryError, ArithmeticError) as exc:
            raise TranscriptError(f"{path}: cannot be read or accounted ({type(exc).__name__})") from exc
        return led, parsed.summary

    @classmethod
    def from_prefix(cls, path: str | Path, lines: int, sha256: str) -> PrivacyLedger:
        """The ledger as it stood when the transcript's first ``lines`` lines (header and events) were
        written, ``sha256`` being the hash of the last of them (:meth:`chain_head`).

        The whole file is checked first (:meth:`from_transcript`: a checkpoint's transcript may hold one
        round more, written before a crash); the prefix's lines are kept verbatim, so what this ledger
        writes extends them.  A prefix the file does not hold raises :class:`TranscriptError`."""
        cls.from_transcript(path)
        parsed = parse_transcript(read_limited(path), str(path))
        if parsed.version < CHAINED_FROM:
            raise TranscriptError(f"{path} is a version-{parsed.version} transcript, without the hash chain a resumed "
                                  f"run extends: rerun without --resume")
        if not 1 <= lines < parsed.summary_line or line_hash(parsed.texts[lines - 1]) != sha256:
            raise TranscriptError(f"{path} does not hold the transcript prefix the checkpoint names (line {lines}, "
                                  f"sha256 {short_repr(sha256, 20)}): it belongs to another run or was rewritten")
        led = cls(parsed.relation, parsed.discretization, notes=parsed.notes)
        led._set_plan_from(parsed)
        for lineno, obj in parsed.events:
            if lineno <= lines:
                led._admit(parse_entry(obj, where(parsed.path, lineno)), where(parsed.path, lineno))
        led._prefix, led._prefix_entries = parsed.texts[:lines], len(led.entries)
        return led

    @classmethod
    def from_chain(cls, path: str | Path, lines: int, sha256: str) -> tuple[PrivacyLedger, int]:
        """The ledger of the whole transcript (every event line, kept verbatim so that what it writes extends
        them), refused unless the file holds the prefix ``(lines, sha256)``; also how many of its entries that
        prefix holds.  A resumed run keeps the charges written after its checkpoint: a message that may have
        left stays charged."""
        named = cls.from_prefix(path, lines, sha256)  # checks the whole file and the prefix
        parsed = parse_transcript(read_limited(path), str(path))
        last = parsed.summary_line - 1
        return cls.from_prefix(path, last, line_hash(parsed.texts[last - 1])), len(named.entries)

    def _set_plan_from(self, parsed: ParsedTranscript) -> None:
        if parsed.plan is None:
            if parsed.budget is not None:
                self.budget = parsed.budget
            return
        total = 0
        for ev, n in parsed.plan:
            total += n * self._accountable_event(ev, f"{parsed.path}, line 1 (plan)")
        if total > MAX_EVENTS:
            raise TranscriptError(f"{parsed.path}, line 1: the plan declares {total} mechanism executions "
                                  f"(limit {MAX_EVENTS})")
        self._set_plan(parsed.plan, parsed.budget)

    def _accountable_event(self, event: PrivacyEvent, at: str) -> int:
        try:
            return self._validate(event)
        except ValueError as exc:  # UnsupportedEventError, AccountingLimitError
            raise TranscriptError(f"{at}: {exc}") from exc

    def _admit(self, entry: Entry, at: str) -> None:
        """Charge a transcript's event line exactly as :meth:`record` would (plan and limits enforced)."""
        weight = self._accountable_event(entry.event, at)
        try:
            self._charge(entry.event, entry.count, weight)
        except ValueError as exc:  # PlanExceededError, AccountingLimitError
            raise TranscriptError(f"{at}: {exc}") from exc
        self.entries.append(entry)

    def _check_summary(self, parsed: ParsedTranscript) -> None:
        """The summary must agree with the events it closes (count, run id, accountant, status)."""
        accountant = self.accountant()
        self.complete = check_summary(parsed, sum(e.count for e in self.entries), self.run_id, accountant,
                                      self.plan is not None)

    def _check_accountable(self, parsed: ParsedTranscript) -> None:
        """Build (and cache) the composition now, refusing it if over the limits; check the budget."""
        try:
            if self.accountant() == "rdp":
                self._curve()
            elif homogeneous_pure(self.entries) is None:
                self._pld()
            if self.plan is not None:
                self.planned_epsilon(parsed.summary["delta"])
                if self.budget is not None:
                    spend = self.planned_epsilon(self.budget.delta)
                    if spend > self.budget.epsilon and not epsilon_close(spend, self.budget.epsilon):
                        raise TranscriptError(f"{parsed.path}, line 1: the plan spends epsilon={spend:.6g} at "
                                              f"delta={self.budget.delta:g}, over the budget epsilon={self.budget.epsilon:g}")
        except AccountingLimitError as exc:
            raise TranscriptError(f"{parsed.path}: {exc}") from exc
