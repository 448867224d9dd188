"""One privacy ledger per private data set, across runs.

A run's own :class:`~sstq_fl.privacy.ledger.PrivacyLedger` bounds what *that run* reveals; a data
set read by many runs loses privacy with every one of them (sequential composition: Dwork,
McSherry, Nissim & Smith 2006; Dwork & Roth 2014, Thm. 3.16).  This module keeps, for each private
data set, an append-only JSON Lines file with one line per finished run that read it, and reports
the **cumulative** ε of the data set: the privacy-loss-distribution composition (Meiser &
Mohammadi 2018; Koskela et al. 2020) of every event of every run, at the caller's δ.  PLD
composition is δ-free, so runs that reported their own ε at different δ still compose exactly (a run
restated by group privacy, below, is converted at the caller's δ).

* Keyed by :func:`dataset_digest` (sha256 over the split's record bytes and labels), stored at
  ``~/.cache/sstq-fl/ledgers/<digest>.jsonl`` unless a path is given.
* :meth:`DatasetLedger.check_plan` refuses a run **before** it touches private data when the data
  set's cumulative ε after the declared plan would exceed a budget.
* :meth:`DatasetLedger.append` adds one line (run id, pipeline, relation, events with counts, the
  run's ε, time, randomness) under an exclusive lock on the ledger's folder, rewriting the file atomically
  (write a temporary file, then rename).
* Runs under both neighbouring relations compose (:mod:`sstq_fl.privacy.relations`): the cumulative ε is
  reported under add/remove while every run was add/remove, else under replace-one, each add/remove run
  re-accounted under replace-one exactly where its events allow it and by group privacy (``k = 2``) otherwise;
  the budget is checked against that figure.  A ledger of a different data set is refused.
* A non-private run (ε = ∞) makes the cumulative ε infinite for good: that is the honest answer, not an
  error.  A run that read no private record (every event public) appends nothing.
* File format: version 1 (its header names the one relation of every run) while every run is under one
  relation, so that older readers still read it; version 2 (each run line names its own) once both are.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..io import atomic_write_bytes
from .errors import BudgetExceededError, short_repr
from .events import RELATIONS, PrivacyEvent, PublicDataEvent
from .events.base import check_relation
from .ledger import PrivacyLedger
from .relations import ADD_OR_REMOVE_UNAVAILABLE, Combined, Run, combine

LEDGER_FORMAT = "sstq-fl-dataset-ledger"
LEDGER_VERSION = 2  # written once runs under both relations are recorded; version 1 otherwise
VERSIONS = (1, 2)
DEFAULT_DIR = Path("~/.cache/sstq-fl/ledgers")
Plan = Sequence[tuple[PrivacyEvent, int]]


def dataset_digest(x: np.ndarray, y: np.ndarray) -> str:
    """sha256 (hex) over a data set's records and labels: shapes, dtypes, then the raw bytes in order."""
    xa, ya = np.ascontiguousarray(x), np.ascontiguousarray(y)
    if xa.shape[:1] != ya.shape or ya.ndim != 1:
        raise ValueError(f"records {xa.shape} and labels {ya.shape} do not match")
    h = hashlib.sha256(f"{LEDGER_FORMAT}:{xa.shape}:{xa.dtype.str}:{ya.dtype.str}|".encode())
    h.update(xa.tobytes())
    h.update(ya.tobytes())
    return h.hexdigest()


def default_path(digest: str) -> Path:
    """Where a data set's ledger lives by default: ``~/.cache/sstq-fl/ledgers/<digest>.jsonl``."""
    return DEFAULT_DIR.expanduser() / f"{digest}.jsonl"


def _runs(entries: Sequence[dict[str, Any]]) -> list[Run]:
    return [Run(str(r["relation"]), [(PrivacyEvent.from_json(e["event"]), int(e["count"])) for e in r["events"]])
            for r in entries]


def reported_relation(relations: set[str]) -> str | None:
    """The relation a ledger of runs under ``relations`` reports: the one relation when there is one, else
    replace-one (``None`` for no run)."""
    if len(relations) == 1:
        return next(iter(relations))
    return "replace_one" if relations else None


class DatasetLedger:
    """The ledger file of one private data set (see the module docstring)."""

    def __init__(self, digest: str, path: str | Path | None = None):
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"dataset digest must be 64 lowercase hex digits, got {digest!r}")
        self.digest = digest
        self.path = Path(path).expanduser() if path else default_path(digest)

    # ------------------------------------------------------------------ reading
    def _parse(self, text: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        lines = [s for s in text.splitlines() if s.strip()]
        if not lines:
            return None, []
        head = self._line(lines[0], 1)
        one = head.get("relation")  # version 1: every run's relation
        if head.get("type") != "header" or head.get("format") != LEDGER_FORMAT or head.get("version") not in VERSIONS \
                or (head.get("version") == 1 and one not in RELATIONS):
            raise ValueError(f"dataset ledger {self.path}: line 1 is not a {LEDGER_FORMAT} v1 or v2 header")
        if head.get("dataset_digest") != self.digest:
            raise ValueError(f"dataset ledger {self.path} belongs to data set {str(head.get('dataset_digest'))[:12]}…, "
                             f"not to this run's {self.digest[:12]}…")
        runs = [self._run(self._line(s, i), i, one if head["version"] == 1 else None)
                for i, s in enumerate(lines[1:], start=2)]
        return head, runs

    def _line(self, text: str, no: int) -> dict[str, Any]:
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"dataset ledger {self.path}: line {no} is not JSON ({exc})") from exc
        if not isinstance(obj, dict):
            raise ValueError(f"dataset ledger {self.path}: line {no} is not a JSON object")
        return obj

    def _run(self, obj: dict[str, Any], no: int, one: str | None) -> dict[str, Any]:
        """Validate one run line: its type, relation (``one``, a version-1 header's, or either) and events (each
        must replay under it)."""
        where = f"dataset ledger {self.path}: line {no}"
        if obj.get("type") != "run" or not isinstance(obj.get("events"), list):
            raise ValueError(f"{where} is not a run entry")
        relation = obj.get("relation")
        if one is not None and relation != one:
            raise ValueError(f"{where} is under {relation!r} but the version-1 ledger's relation is {one!r}")
        if relation not in RELATIONS:
            raise ValueError(f"{where} is under {short_repr(relation)}, not one of {RELATIONS}")
        try:
            seen: set[str] = set()  # each distinct event is validated once (a DP-SGD run lists one line per step)
            for e in obj["events"]:
                if not (isinstance(e.get("count"), int) and e["count"] >= 0):
                    raise ValueError(f"bad count {e.get('count')!r}")
                key = json.dumps(e["event"], sort_keys=True)
                if key not in seen:
                    PrivacyLedger(relation).record(PrivacyEvent.from_json(e["event"]), e["count"])
                    seen.add(key)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"{where} has an unreadable event ({exc})") from exc
        return obj

    def read(self) -> tuple[str | None, list[dict[str, Any]]]:
        """``(the relation it reports, run entries)``, validated (:func:`reported_relation`: ``None`` when empty);
        a malformed file raises ValueError."""
        if not self.path.exists():
            return None, []
        try:
            _, runs = self._parse(self.path.read_text())
        except UnicodeDecodeError as exc:
            raise ValueError(f"dataset ledger {self.path} is not UTF-8 text") from exc
        return reported_relation({str(r["relation"]) for r in runs}), runs

    # ------------------------------------------------------------------ queries
    def combined(self, delta: float, plan: Plan = (), relation: str | None = None, both: bool = True) -> Combined | None:
        """The data set's ε at ``delta`` over every recorded run, plus ``plan`` (a run under ``relation``) if given
        (:func:`sstq_fl.privacy.relations.combine`); ``None`` for no run."""
        return self._combine(self.read()[1], delta, plan, relation, both)

    def _combine(self, entries: list[dict[str, Any]], delta: float, plan: Plan, relation: str | None,
                 both: bool) -> Combined | None:
        runs = _runs(entries)
        if plan:
            if relation is None:
                raise ValueError("a plan needs the relation it is accounted under")
            check_relation(relation)
            runs.append(Run(relation, list(plan)))
        return combine(runs, delta, both) if runs else None

    def cumulative(self, relation: str, delta: float, plan: Plan = ()) -> float:
        """The data set's ε at ``delta`` over every recorded run, plus ``plan`` (under ``relation``) if given,
        under the relation the ledger then reports (:func:`reported_relation`)."""
        check_relation(relation)
        out = self.combined(delta, plan, relation, both=False)
        return 0.0 if out is None else out.epsilon

    def check_plan(self, plan: Plan, relation: str, delta: float, budget_epsilon: float | None) -> float:
        """The cumulative ε after ``plan`` (a run under ``relation``); raises :class:`BudgetExceededError` (a
        ValueError) when it would exceed ``budget_epsilon``.  Call before any private computation."""
        if budget_epsilon is not None and not budget_epsilon > 0:
            raise ValueError(f"dataset budget epsilon must be positive, got {budget_epsilon}")
        check_relation(relation)
        out = self.combined(delta, plan, relation, both=False)
        eps, under = (0.0, relation) if out is None else (out.epsilon, out.relation)
        if budget_epsilon is not None and eps > budget_epsilon:
            raise BudgetExceededError(f"data set {self.digest[:12]}…: cumulative epsilon after this run would be {eps:.4g} "
                                      f"({under}) at delta={delta:g}, over its budget {budget_epsilon:g} (ledger "
                                      f"{self.path})")
        return eps

    # ------------------------------------------------------------------ writing
    @contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive ``flock`` on the ledger's folder for a read-modify-write (the file itself is replaced
        by rename, so it cannot carry the lock; no lock file is left behind)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def append(self, ledger: PrivacyLedger, run_id: str, pipeline: str, delta: float, randomness: str) -> dict[str, Any]:
        """Append the run's private events (one line) and return the metrics fields: ``dataset_epsilon_cumulative``
        (under the reported relation; None when infinite) and ``dataset_ledger`` (:func:`ledger_report`)."""
        events = [{"event": e.event.to_json(), "count": e.count} for e in ledger.entries
                  if e.subset != "public" and not isinstance(e.event, PublicDataEvent) and e.count]
        with self._locked():
            _, runs = self.read()
            if events:
                runs.append(self._entry(ledger, run_id, pipeline, delta, randomness, events))
                self._write(runs)
        out = self._combine(runs, delta, (), None, both=True)
        eps = 0.0 if out is None else out.epsilon
        return {"dataset_epsilon_cumulative": eps if math.isfinite(eps) else None,
                "dataset_ledger": {"path": str(self.path), "digest": self.digest, "runs": len(runs),
                                   "delta": delta, "appended": bool(events),
                                   **ledger_report(out, runs, ledger.relation)}}

    def _entry(self, ledger: PrivacyLedger, run_id: str, pipeline: str, delta: float, randomness: str,
               events: list[dict[str, Any]]) -> dict[str, Any]:
        eps = ledger.epsilon(delta)
        return {"type": "run", "run_id": run_id, "pipeline": pipeline, "relation": ledger.relation, "events": events,
                "epsilon": eps if math.isfinite(eps) else None, "delta": delta, "randomness": randomness,
                "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def _write(self, runs: list[dict[str, Any]]) -> None:
        """Rewrite the file: a version-1 header naming the relation while every run is under one, else version 2."""
        relations = sorted({str(r["relation"]) for r in runs})
        head: dict[str, Any] = {"type": "header", "format": LEDGER_FORMAT, "dataset_digest": self.digest}
        head.update({"version": 1, "relation": relations[0]} if len(relations) == 1 else {"version": LEDGER_VERSION})
        text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in [head, *runs])
        atomic_write_bytes(self.path, text.encode())


def ledger_report(out: Combined | None, runs: list[dict[str, Any]], relation: str) -> dict[str, Any]:
    """The ``dataset_ledger`` fields about the ε: the relation reported (``relation``, the run's, for an empty
    ledger), the ε under each relation (add/remove only where every run was: else a note why not), and per run
    its relation, the ε it reported itself and how it is stated under replace-one (``method``)."""
    if out is None:
        return {"relation": relation, "entries": []}
    eps = {"epsilon_replace_one": out.epsilon_replace_one, **(
        {"epsilon_add_or_remove_one": out.epsilon_add_or_remove_one} if out.epsilon_add_or_remove_one is not None
        else {"add_or_remove_one": ADD_OR_REMOVE_UNAVAILABLE})}
    entries = [{"run_id": r.get("run_id"), "pipeline": r.get("pipeline"), "relation": r["relation"], "method": m,
                "epsilon": r.get("epsilon"), "delta": r.get("delta")} for r, m in zip(runs, out.methods, strict=True)]
    note = {} if math.isfinite(out.epsilon) else {
        "note": "a non-private run (epsilon = inf) read this data set: its cumulative epsilon is infinite"}
    return {"relation": out.relation, **eps, "entries": entries, **note}
