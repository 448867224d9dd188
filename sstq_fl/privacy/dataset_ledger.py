"""One privacy ledger per private data set, across runs.

A run's own :class:`~sstq_fl.privacy.ledger.PrivacyLedger` bounds what *that run* reveals; a data
set read by many runs loses privacy with every one of them (sequential composition: Dwork,
McSherry, Nissim & Smith 2006; Dwork & Roth 2014, Thm. 3.16).  This module keeps, for each private
data set, an append-only JSON Lines file with one line per finished run that read it, and reports
the **cumulative** ε of the data set: the privacy-loss-distribution composition (Meiser &
Mohammadi 2018; Koskela et al. 2020) of every event of every run, at the caller's δ.  PLD
composition is δ-free, so runs that reported their own ε at different δ still compose exactly.

* Keyed by :func:`dataset_digest` (sha256 over the split's record bytes and labels), stored at
  ``~/.cache/sstq-fl/ledgers/<digest>.jsonl`` unless a path is given.
* :meth:`DatasetLedger.check_plan` refuses a run **before** it touches private data when the data
  set's cumulative ε after the declared plan would exceed a budget.
* :meth:`DatasetLedger.append` adds one line (run id, pipeline, relation, events with counts, the
  run's ε, time, randomness) under an exclusive lock on the ledger's folder, rewriting the file atomically
  (write a temporary file, then rename).
* One neighbouring relation per data set.  A non-private run (ε = ∞) makes the cumulative ε
  infinite for good: that is the honest answer, not an error.  A run that read no private record
  (every event public) appends nothing.
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
from .errors import BudgetExceededError
from .events import RELATIONS, PrivacyEvent, PublicDataEvent
from .events.base import check_relation
from .ledger import PrivacyLedger

LEDGER_FORMAT = "sstq-fl-dataset-ledger"
LEDGER_VERSION = 1
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


def _events(entries: Sequence[dict[str, Any]]) -> list[tuple[PrivacyEvent, int]]:
    return [(PrivacyEvent.from_json(e["event"]), int(e["count"])) for run in entries for e in run["events"]]


def compose(relation: str, plan: Plan, delta: float) -> float:
    """ε at ``delta`` of every ``(event, count)`` in ``plan`` composed (PLD; ``inf`` with a non-private event)."""
    led = PrivacyLedger(relation)
    for ev, n in plan:
        led.record(ev, n)
    return led.epsilon(delta)


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
        if head.get("type") != "header" or head.get("format") != LEDGER_FORMAT or head.get("version") != LEDGER_VERSION \
                or head.get("relation") not in RELATIONS:
            raise ValueError(f"dataset ledger {self.path}: line 1 is not a {LEDGER_FORMAT} v{LEDGER_VERSION} header")
        if head.get("dataset_digest") != self.digest:
            raise ValueError(f"dataset ledger {self.path} belongs to data set {str(head.get('dataset_digest'))[:12]}…, "
                             f"not to this run's {self.digest[:12]}…")
        runs = [self._run(self._line(s, i), i, head["relation"]) for i, s in enumerate(lines[1:], start=2)]
        return head, runs

    def _line(self, text: str, no: int) -> dict[str, Any]:
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"dataset ledger {self.path}: line {no} is not JSON ({exc})") from exc
        if not isinstance(obj, dict):
            raise ValueError(f"dataset ledger {self.path}: line {no} is not a JSON object")
        return obj

    def _run(self, obj: dict[str, Any], no: int, relation: str) -> dict[str, Any]:
        """Validate one run line: its type, relation and events (each must replay)."""
        where = f"dataset ledger {self.path}: line {no}"
        if obj.get("type") != "run" or not isinstance(obj.get("events"), list):
            raise ValueError(f"{where} is not a run entry")
        if obj.get("relation") != relation:
            raise ValueError(f"{where} is under {obj.get('relation')!r} but the ledger's relation is {relation!r}")
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
        """``(relation or None when empty, run entries)``, validated; a malformed file raises ValueError."""
        if not self.path.exists():
            return None, []
        try:
            head, runs = self._parse(self.path.read_text())
        except UnicodeDecodeError as exc:
            raise ValueError(f"dataset ledger {self.path} is not UTF-8 text") from exc
        return (None if head is None else str(head["relation"])), runs

    # ------------------------------------------------------------------ queries
    def _check_relation(self, have: str | None, relation: str) -> None:
        check_relation(relation)
        if have is not None and have != relation:
            raise ValueError(f"dataset ledger {self.path} is under {have}; a {relation} run cannot be composed with it")

    def cumulative(self, relation: str, delta: float, plan: Plan = ()) -> float:
        """The data set's ε at ``delta`` over every recorded run, plus ``plan`` if given."""
        have, runs = self.read()
        self._check_relation(have, relation)
        return compose(relation, [*_events(runs), *plan], delta)

    def check_plan(self, plan: Plan, relation: str, delta: float, budget_epsilon: float | None) -> float:
        """The cumulative ε after ``plan``; raises :class:`BudgetExceededError` (a ValueError) when it would
        exceed ``budget_epsilon``.  Call before any private computation."""
        if budget_epsilon is not None and not budget_epsilon > 0:
            raise ValueError(f"dataset budget epsilon must be positive, got {budget_epsilon}")
        eps = self.cumulative(relation, delta, plan)
        if budget_epsilon is not None and eps > budget_epsilon:
            raise BudgetExceededError(f"data set {self.digest[:12]}…: cumulative epsilon after this run would be {eps:.4g} "
                                      f"at delta={delta:g}, over its budget {budget_epsilon:g} (ledger {self.path})")
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
        (None when infinite) and ``dataset_ledger`` (path, digest, runs, relation)."""
        events = [{"event": e.event.to_json(), "count": e.count} for e in ledger.entries
                  if e.subset != "public" and not isinstance(e.event, PublicDataEvent) and e.count]
        with self._locked():
            have, runs = self.read()
            self._check_relation(have, ledger.relation)
            if events:
                runs.append(self._entry(ledger, run_id, pipeline, delta, randomness, events))
                self._write(ledger.relation, runs)
        eps = compose(ledger.relation, _events(runs), delta)
        return {"dataset_epsilon_cumulative": eps if math.isfinite(eps) else None,
                "dataset_ledger": {"path": str(self.path), "digest": self.digest, "runs": len(runs),
                                   "relation": ledger.relation, "delta": delta, "appended": bool(events),
                                   **({} if math.isfinite(eps) else {"note": "a non-private run (epsilon = inf) read "
                                                                     "this data set: its cumulative epsilon is infinite"})}}

    def _entry(self, ledger: PrivacyLedger, run_id: str, pipeline: str, delta: float, randomness: str,
               events: list[dict[str, Any]]) -> dict[str, Any]:
        eps = ledger.epsilon(delta)
        return {"type": "run", "run_id": run_id, "pipeline": pipeline, "relation": ledger.relation, "events": events,
                "epsilon": eps if math.isfinite(eps) else None, "delta": delta, "randomness": randomness,
                "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def _write(self, relation: str, runs: list[dict[str, Any]]) -> None:
        head = {"type": "header", "format": LEDGER_FORMAT, "version": LEDGER_VERSION, "dataset_digest": self.digest,
                "relation": relation}
        text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in [head, *runs])
        atomic_write_bytes(self.path, text.encode())
