"""The privacy transcript: a run's ledger as JSON Lines, written atomically and read strictly.

A transcript is a header (format, version, relation, discretization, library versions,
budget, plan, notes), one line per recorded event, and a summary that must be the last line.
From version 3 the lines are hash-chained: every line after the header carries ``prev``, the
sha256 (hex) of the exact bytes of the line before it (without its newline), so the hash of a
line commits to every line up to it (a Merkle-Damgård chain; Haber & Stornetta, J. Cryptology
1991).  An edit, deletion or insertion anywhere breaks the chain at the line after it, and a
checkpoint names the prefix it belongs to by ``(lines, sha256 of its last line)``.  The hashes
are unkeyed: they catch accidents and partial edits, not whoever rewrites every line.
Reading is strict: every malformed transcript raises :class:`TranscriptError` with a one-line
message naming the problem and the line (unknown or missing fields, wrong JSON types,
non-positive/fractional/bool/huge counts, duplicate keys, deep nesting, a missing, misplaced or
repeated summary, a summary that contradicts the events).  Turning the lines into a ledger
(plan and limits enforced) is :meth:`sstq_fl.privacy.ledger.PrivacyLedger.from_transcript`.

Recorded and recomputed ε agree to the relative tolerance :data:`REPLAY_RTOL` (PLD numerics
differ in the last digits between machines).
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import __version__
from ..io import atomic_write_bytes, finite_json, no_duplicate_keys
from .errors import Budget, TranscriptError, check_count, short_repr
from .events.base import RELATIONS, PrivacyEvent
from .floats import finite_real

TRANSCRIPT_FORMAT = "sstq-fl-privacy-transcript"
TRANSCRIPT_VERSION = 3  # 2: the summary carries run_id, complete, stopped_early, accountant; 3: lines hash-chained
READABLE_VERSIONS = (1, 2, 3)
CHAINED_FROM = 3  # the first version whose lines carry ``prev``
MAX_TRANSCRIPT_BYTES = 64 * 2**20  # a transcript file larger than this is refused unread
MAX_JSON_DEPTH = 64  # nesting of JSON containers accepted on one transcript line
REPLAY_RTOL = 1e-6  # replayed and recorded ε agree if |a − b| <= REPLAY_RTOL · max(|a|, |b|) ...
REPLAY_ATOL = 1e-9  # ... or |a − b| <= REPLAY_ATOL (both ε near 0); an infinite ε matches only ∞
_HEADER_KEYS = {"type", "format", "version", "relation", "discretization", "libraries", "budget", "plan", "notes"}
_EVENT_KEYS = {"type", "event", "count", "subset", "note"}
_SUMMARY_KEYS = {"type", "relation", "delta", "epsilon", "events", "epsilon_rdp_crosscheck"}
_SUMMARY_V2_KEYS = {"accountant", "run_id", "complete", "stopped_early"}  # required from version 2 on
Plan = list[tuple[PrivacyEvent, int]]


@dataclass
class Entry:
    """One event line: ``count`` runs of ``event`` on ``subset``, with a note and what a pipeline
    records about the execution (``meta``: stage, bound, std, q, clients, ...)."""

    event: PrivacyEvent
    count: int
    subset: str = "private"
    note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {"type": "event", "event": self.event.to_json(), "count": self.count, "subset": self.subset, "note": self.note}
        if self.meta:
            out["meta"] = self.meta
        return out

    def merges_with(self, event: PrivacyEvent, subset: str, note: str, meta: dict[str, Any] | None) -> bool:
        return not meta and not self.meta and self.event == event and self.subset == subset and self.note == note


def header_line(relation: str, discretization: float, budget: Budget | None, plan: Plan | None,
                notes: dict[str, Any]) -> dict[str, Any]:
    """The header of a ledger's transcript (with the versions of sstq-fl, dp-accounting, Python)."""
    return {"type": "header", "format": TRANSCRIPT_FORMAT, "version": TRANSCRIPT_VERSION,
            "relation": relation, "discretization": discretization,
            "libraries": {"sstq_fl": __version__, "dp_accounting": metadata.version("dp-accounting"),
                          "python": platform.python_version()},
            "budget": None if budget is None else {"epsilon": budget.epsilon, "delta": budget.delta},
            "plan": None if plan is None else [{"event": ev.to_json(), "count": n} for ev, n in plan],
            "notes": notes}


def line_hash(text: str) -> str:
    """The sha256 (hex) of one line's text (UTF-8, without its newline): what the next line's ``prev`` holds."""
    return hashlib.sha256(text.encode()).hexdigest()


def chained_texts(lines: Sequence[dict[str, Any]], before: Sequence[str] = ()) -> list[str]:
    """``before`` followed by ``lines`` as standard JSON (an infinite ε as null), each line after the
    first of all carrying ``prev``, the :func:`line_hash` of the line before it."""
    texts = list(before)
    for line in lines:
        obj = finite_json(line) if not texts else {**finite_json(line), "prev": line_hash(texts[-1])}
        texts.append(json.dumps(obj, sort_keys=True, allow_nan=False))
    return texts


def write_texts(path: str | Path, texts: Sequence[str]) -> str:
    """Write the lines ``texts`` atomically as JSON Lines; the sha256 (hex) of the bytes written."""
    data = "".join(t + "\n" for t in texts).encode()
    atomic_write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


def write_lines(path: str | Path, lines: Sequence[dict[str, Any]]) -> str:
    """Write ``lines`` hash-chained (:func:`chained_texts`) atomically; the sha256 (hex) of the bytes."""
    return write_texts(path, chained_texts(lines))


def epsilon_close(a: float, b: float) -> bool:
    """Whether two ε agree to the replay tolerance (:data:`REPLAY_RTOL`, :data:`REPLAY_ATOL`);
    an infinite ε agrees only with an infinite ε of the same sign."""
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=REPLAY_RTOL, abs_tol=REPLAY_ATOL)


# ---------------------------------------------------------------------- reading


@dataclass
class ParsedTranscript:
    """A transcript whose lines have each been checked on their own (types, fields, order)."""

    path: str
    version: int
    relation: str
    discretization: float
    notes: dict[str, Any]
    budget: Budget | None
    plan: Plan | None
    events: list[tuple[int, dict[str, Any]]]
    summary: dict[str, Any]
    summary_line: int
    texts: list[str] = field(default_factory=list)


def where(path: str, lineno: int) -> str:
    """``"<path>, line <n>"``, the place a refusal names."""
    return f"{path}, line {lineno}"


def read_limited(path: str | Path, what: str = "transcript") -> bytes:
    """The file's bytes (refusing a missing or unreadable file and one over :data:`MAX_TRANSCRIPT_BYTES`)."""
    try:
        with open(path, "rb") as f:  # read at most one byte past the limit (a device or pipe may never end)
            data = f.read(MAX_TRANSCRIPT_BYTES + 1)
    except OSError as exc:
        raise TranscriptError(f"cannot read {what} {path}: {exc.strerror or type(exc).__name__}") from exc
    if len(data) > MAX_TRANSCRIPT_BYTES:
        raise TranscriptError(f"{path} is over the {MAX_TRANSCRIPT_BYTES}-byte limit of a {what}")
    return data


def parse_transcript(data: bytes, path: str) -> ParsedTranscript:
    """Check every line on its own and their order: header first, summary last and once."""
    texts = _text_lines(data, path)
    rows = [(i, _json_line(row, where(path, i), path if i == 1 else None)) for i, row in enumerate(texts, 1)]
    out = _parse_header(rows[0][1], path)
    out.texts = texts
    summary_line = 0
    for lineno, obj in rows[1:]:
        at = where(path, lineno)
        if not isinstance(obj, dict):
            raise TranscriptError(f"{at}: expected a JSON object, got {_json_type(obj)}")
        if out.version >= CHAINED_FROM:
            _check_chain(obj, texts[lineno - 2], at, lineno)
        if summary_line:
            again = "a second summary" if obj.get("type") == "summary" else "a line"
            raise TranscriptError(f"{at}: {again} after the summary (line {summary_line}); the summary must be last")
        if obj.get("type") == "event":
            out.events.append((lineno, obj))
        elif obj.get("type") == "summary":
            out.summary, summary_line = _parse_summary(obj, out, at), lineno
        else:
            raise TranscriptError(f"{at}: unknown line type {short_repr(obj.get('type'))} (expected event or summary)")
    if not summary_line:
        raise TranscriptError(f"{path} has no summary line: the transcript is truncated or unfinished "
                              f"(it must end with its summary)")
    out.summary_line = summary_line
    return out


def parse_entry(obj: dict[str, Any], at: str) -> Entry:
    """One event line: exactly type, event, count (1..MAX_EVENTS), subset, note and optional meta."""
    _exact_keys(obj, _EVENT_KEYS, {"meta"}, at)
    event = _event_field(obj["event"], at)
    count = _count_field(obj["count"], "event count", at, 1)
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise TranscriptError(f"{at}: meta must be an object, got {_json_type(meta)}")
    return Entry(event, count, _string(obj["subset"], "subset", at), _string(obj["note"], "note", at), meta)


def check_summary(parsed: ParsedTranscript, events: int, run_id: str | None, accountant: str, planned: bool) -> bool:
    """The summary must agree with the events it closes (count, run id, accountant, status);
    returns whether the run is complete."""
    s, at = parsed.summary, where(parsed.path, parsed.summary_line)
    if s["events"] != events:
        raise TranscriptError(f"{at}: the summary counts {s['events']} events but the transcript records {events}")
    if s.get("run_id", run_id) != run_id:
        raise TranscriptError(f"{at}: the summary's run_id {short_repr(s['run_id'])} is not the header's "
                              f"{short_repr(run_id)}")
    if s.get("accountant", accountant) != accountant:
        raise TranscriptError(f"{at}: the summary names the {s['accountant']} accountant, but these events are "
                              f"accounted by {accountant}")
    if ("planned_epsilon" in s) != planned:
        raise TranscriptError(f"{at}: planned_epsilon must be present exactly when the header declares a plan")
    complete = s["complete"] if "complete" in s else (planned and not s.get("stopped_early", True))
    if s.get("stopped_early", False) != (planned and not complete):
        raise TranscriptError(f"{at}: stopped_early={s['stopped_early']} contradicts complete={complete} "
                              f"(plan {'declared' if planned else 'absent'})")
    return complete


def _parse_header(obj: Any, path: str) -> ParsedTranscript:
    if not (isinstance(obj, dict) and obj.get("type") == "header" and obj.get("format") == TRANSCRIPT_FORMAT):
        raise TranscriptError(f"{path} is not an sstq-fl privacy transcript (line 1 is not its header)")
    at = where(path, 1)
    _exact_keys(obj, _HEADER_KEYS, set(), at)
    version = obj["version"]
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise TranscriptError(f"{at}: unsupported transcript version {short_repr(version)} (readable: {READABLE_VERSIONS})")
    if obj["relation"] not in RELATIONS:
        raise TranscriptError(f"{at}: relation must be one of {RELATIONS}, got {short_repr(obj['relation'])}")
    disc = _real(obj["discretization"], "discretization", at)
    if not 0 < disc <= 0.1:
        raise TranscriptError(f"{at}: discretization must be in (0, 0.1], got {disc!r}")
    libs, notes = obj["libraries"], obj["notes"]
    if not (isinstance(libs, dict) and all(isinstance(v, str) for v in libs.values())):
        raise TranscriptError(f"{at}: libraries must be an object of version strings")
    if not isinstance(notes, dict):
        raise TranscriptError(f"{at}: notes must be an object, got {_json_type(notes)}")
    if "run_id" in notes:
        _string(notes["run_id"], "notes.run_id", at)
    return ParsedTranscript(path, version, obj["relation"], disc, notes, _parse_budget(obj["budget"], at),
                       _parse_plan(obj["plan"], at), [], {}, 0)


def _parse_budget(obj: Any, at: str) -> Budget | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise TranscriptError(f"{at}: budget must be an object or null, got {_json_type(obj)}")
    _exact_keys(obj, {"epsilon", "delta"}, set(), f"{at} (budget)")
    try:
        return Budget(_real(obj["epsilon"], "budget epsilon", at), _real(obj["delta"], "budget delta", at))
    except TranscriptError:
        raise
    except ValueError as exc:
        raise TranscriptError(f"{at}: {exc}") from exc


def _parse_plan(obj: Any, at: str) -> Plan | None:
    if obj is None:
        return None
    if not isinstance(obj, list):
        raise TranscriptError(f"{at}: plan must be a list or null, got {_json_type(obj)}")
    plan = []
    for i, item in enumerate(obj):
        w = f"{at} (plan item {i})"
        if not isinstance(item, dict):
            raise TranscriptError(f"{w}: expected an object, got {_json_type(item)}")
        _exact_keys(item, {"event", "count"}, set(), w)
        plan.append((_event_field(item["event"], w), _count_field(item["count"], "planned count", w, 0)))
    return plan


def _parse_summary(obj: dict[str, Any], head: ParsedTranscript, at: str) -> dict[str, Any]:
    """The summary's fields, each of its type (consistency with the events is checked later)."""
    v2 = head.version >= 2
    _exact_keys(obj, _SUMMARY_KEYS | (_SUMMARY_V2_KEYS if v2 else set()),
                {"planned_epsilon"} | (set() if v2 else {"accountant", "stopped_early"}), at)
    if obj["relation"] != head.relation:
        raise TranscriptError(f"{at}: the summary's relation {short_repr(obj['relation'])} is not the header's "
                              f"{head.relation!r}")
    delta = _real(obj["delta"], "summary delta", at)
    if not 0 <= delta < 1:
        raise TranscriptError(f"{at}: summary delta must be in [0, 1), got {delta!r}")
    for key in ("epsilon", "planned_epsilon"):
        if obj.get(key, 0) is None:  # standard JSON writes ε = ∞ as null (older transcripts: Infinity)
            obj[key] = math.inf
    for key in ("epsilon", "planned_epsilon", "epsilon_rdp_crosscheck"):
        if key in obj and not (key == "epsilon_rdp_crosscheck" and obj[key] is None):
            if _real(obj[key], f"summary {key}", at, allow_inf=True) < 0:
                raise TranscriptError(f"{at}: summary {key} must be non-negative, got {obj[key]!r}")
    _count_field(obj["events"], "summary events", at, 0)
    if obj.get("accountant", "pld") not in ("pld", "pure-kov", "rdp"):
        raise TranscriptError(f"{at}: unknown accountant {short_repr(obj['accountant'])}")
    for key in ("complete", "stopped_early"):
        if key in obj and not isinstance(obj[key], bool):
            raise TranscriptError(f"{at}: summary {key} must be true or false, got {short_repr(obj[key])}")
    if obj.get("run_id") is not None:
        _string(obj["run_id"], "summary run_id", at)
    return obj


def _check_chain(obj: dict[str, Any], before: str, at: str, lineno: int) -> None:
    """Remove ``obj``'s ``prev``, refusing it unless it is the hash of the line ``before`` it."""
    prev = obj.pop("prev", None)
    if prev is None:
        raise TranscriptError(f"{at}: missing field(s) ['prev'] (each line after the header carries the sha256 of the "
                              f"line before it)")
    if prev != line_hash(before):
        raise TranscriptError(f"{at}: the hash chain breaks here (prev is not the sha256 of line {lineno - 1}): line "
                              f"{lineno - 1} was edited, or a line was deleted or inserted before this one")


def _text_lines(data: bytes, path: str) -> list[str]:
    """Decode UTF-8 and split into lines (at least one; one optional final newline)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{path} is not UTF-8 text (invalid byte at offset {exc.start})") from exc
    if not text.strip():
        raise TranscriptError(f"{path} is empty, not an sstq-fl privacy transcript")
    rows = text.split("\n")
    if rows[-1] == "":
        rows.pop()
    return rows


def _json_line(row: str, at: str, first_of: str | None) -> Any:
    """One line's JSON value (duplicate keys, deep nesting, invalid JSON refused)."""
    try:
        if not row.strip():
            raise ValueError("the line is empty")
        obj = json.loads(row, object_pairs_hook=no_duplicate_keys)
    except (ValueError, RecursionError, MemoryError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or type(exc).__name__
        if isinstance(exc, RecursionError):
            why = f"nested more than {MAX_JSON_DEPTH} deep"
        if first_of is not None:
            raise TranscriptError(f"{first_of} is not an sstq-fl privacy transcript (line 1 is not JSON: {why})") from exc
        raise TranscriptError(f"{at}: invalid JSON ({why})") from exc
    _check_depth(obj, at)
    return obj


def _check_depth(obj: Any, at: str) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH` (iteratively: no recursion)."""
    stack = [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            if d > MAX_JSON_DEPTH:
                raise TranscriptError(f"{at}: JSON nested more than {MAX_JSON_DEPTH} deep")
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))


def _json_type(v: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(v), "a number")


def _exact_keys(obj: dict[str, Any], required: set[str], optional: set[str], at: str) -> None:
    extra, missing = set(obj) - required - optional, required - set(obj)
    if extra:
        raise TranscriptError(f"{at}: unknown field(s) {short_repr(sorted(extra))}")
    if missing:
        raise TranscriptError(f"{at}: missing field(s) {sorted(missing)}")


def _real(v: Any, what: str, at: str, allow_inf: bool = False) -> float:
    """A JSON number (not a bool, not NaN; infinite only if ``allow_inf``) as float."""
    if allow_inf and isinstance(v, float) and math.isinf(v):
        return v
    try:
        return finite_real(v, what)
    except ValueError as exc:
        raise TranscriptError(f"{at}: {exc}") from exc


def _count_field(v: Any, what: str, at: str, minimum: int) -> int:
    try:
        return check_count(v, what, minimum)
    except ValueError as exc:
        raise TranscriptError(f"{at}: {exc}") from exc


def _event_field(v: Any, at: str) -> PrivacyEvent:
    try:
        return PrivacyEvent.from_json(v)
    except ValueError as exc:
        raise TranscriptError(f"{at}: {exc}") from exc


def _string(v: Any, what: str, at: str) -> str:
    if not isinstance(v, str):
        raise TranscriptError(f"{at}: {what} must be a string, got {_json_type(v)}")
    return v
