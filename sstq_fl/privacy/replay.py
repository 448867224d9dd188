"""Replay and binding: a transcript recomputed alone, and a run's metrics tied to its transcript.

:func:`replay` rebuilds the ledger from a transcript (strictly,
:meth:`~sstq_fl.privacy.ledger.PrivacyLedger.from_transcript`), recomputes ε and compares it with
the recorded one to the relative tolerance :data:`~sstq_fl.privacy.transcript.REPLAY_RTOL`.
:func:`transcript_binding` / :func:`check_binding` bind a run's ``metrics.json`` to its
transcript by run id and sha256, and :func:`check_metrics` checks every ε-bearing field of the
metrics against the replayed ledger (final ε and δ, relation, rounds, per-round ε, per-message ε).
An unkeyed digest catches accidents and partial edits; whoever rewrites every file can rewrite
both consistently (what protects a client against the server is its own ledger).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from .errors import TranscriptError, short_repr
from .ledger import PrivacyLedger
from .transcript import CHAINED_FROM, REPLAY_RTOL, epsilon_close, parse_transcript, read_limited

Check = tuple[str, Any, Any]  # (the metrics field, its value, what the replayed transcript gives)


def replay(path: str | Path, delta: float | None = None) -> dict[str, Any]:
    """Recompute ε from a transcript alone and compare it with the recorded summary.

    At the summary's δ (the default) the recomputed ε and planned ε must agree with the
    recorded ones to :data:`REPLAY_RTOL`; ``matches_recorded`` says whether they do and
    ``mismatch`` says how they differ.  Malformed transcripts raise :class:`TranscriptError`.
    """
    led, summary = PrivacyLedger.from_transcript(path)
    d = summary["delta"] if delta is None else delta
    if isinstance(d, bool) or not 0 <= d < 1:
        raise ValueError(f"delta must be in [0, 1), got {d!r}")
    eps = led.epsilon(d)
    out: dict[str, Any] = {"file": str(path), "relation": led.relation, "delta": d, "epsilon": eps,
                           "epsilon_rdp_crosscheck": led.rdp_epsilon(d), "events": sum(e.count for e in led.entries),
                           "run_id": led.run_id, "complete": led.complete}
    if d == summary["delta"]:
        problems = [] if epsilon_close(eps, summary["epsilon"]) else \
            [f"epsilon recomputed {eps!r}, recorded {summary['epsilon']!r}"]
        if led.plan is not None:
            out["planned_epsilon"] = led.planned_epsilon(d)
            if not epsilon_close(out["planned_epsilon"], summary["planned_epsilon"]):
                problems.append(f"planned epsilon recomputed {out['planned_epsilon']!r}, recorded "
                                f"{summary['planned_epsilon']!r}")
        out["recorded_epsilon"], out["matches_recorded"] = summary["epsilon"], not problems
        if problems:
            out["mismatch"] = "; ".join(problems) + f" (relative tolerance {REPLAY_RTOL:g})"
    return out


def transcript_binding(path: str | Path) -> dict[str, Any]:
    """``{"run_id", "sha256", "epsilon", "delta"}`` of a transcript, for ``metrics.json`` under
    ``"privacy_transcript"``.

    ``sha256`` is the hex digest of the file's bytes; ``run_id``, ``epsilon`` and ``delta`` are
    the summary's (``epsilon`` is ``None`` when infinite, JSON having no infinity; ``run_id``
    is ``None`` for a run without one).  The transcript is checked line by line
    (:class:`TranscriptError`), not re-accounted.
    """
    try:
        data = read_limited(path)
        parsed = parse_transcript(data, str(path))
    except (RecursionError, MemoryError, ArithmeticError) as exc:
        raise TranscriptError(f"{path}: cannot be read ({type(exc).__name__})") from exc
    s = parsed.summary
    rid = s.get("run_id", parsed.notes.get("run_id"))
    return {"run_id": rid, "sha256": hashlib.sha256(data).hexdigest(),
            "epsilon": s["epsilon"] if math.isfinite(s["epsilon"]) else None, "delta": s["delta"]}


def check_binding(metrics: dict[str, Any], transcript_path: str | Path) -> None:
    """Refuse (:class:`TranscriptError`) a transcript that is not the one ``metrics`` is bound to.

    ``metrics["privacy_transcript"]`` (see :func:`transcript_binding`) must name the
    transcript's run id and sha256, its δ, and its ε to :data:`REPLAY_RTOL` (``None`` = ∞).
    """
    b = metrics.get("privacy_transcript") if isinstance(metrics, dict) else None
    if not isinstance(b, dict) or not {"run_id", "sha256", "epsilon", "delta"} <= set(b):
        raise TranscriptError("the metrics carry no privacy_transcript binding (run_id, sha256, epsilon, delta)")
    got = transcript_binding(transcript_path)
    if b["run_id"] != got["run_id"]:
        raise TranscriptError(f"{transcript_path} belongs to run {short_repr(got['run_id'])}, but the metrics are of run "
                              f"{short_repr(b['run_id'])}")
    if b["sha256"] != got["sha256"]:
        raise TranscriptError(f"{transcript_path} is not the transcript bound to the metrics: its sha256 is "
                              f"{got['sha256']}, the metrics say {short_repr(b['sha256'])}")
    if isinstance(b["delta"], bool) or b["delta"] != got["delta"]:
        raise TranscriptError(f"the metrics record delta {short_repr(b['delta'])}, the transcript {got['delta']!r}")
    rec = math.inf if b["epsilon"] is None else b["epsilon"]
    have = math.inf if got["epsilon"] is None else got["epsilon"]
    if isinstance(rec, bool) or not isinstance(rec, int | float) or not epsilon_close(float(rec), have):
        raise TranscriptError(f"the metrics record epsilon {short_repr(b['epsilon'])}, the transcript {have!r} "
                              f"(relative tolerance {REPLAY_RTOL:g})")


def check_metrics(metrics: dict[str, Any], transcript_path: str | Path) -> None:
    """Refuse (:class:`TranscriptError`, naming the field) metrics whose binding (:func:`check_binding`) or
    any ε-bearing field disagrees with the replayed transcript: a training run's ``final.epsilon_total``,
    ``final.delta``, ``config.delta``, ``config.rounds`` (the plan), each round's ``epsilon_spent`` and
    the rounds charged, and ``config.epsilon`` (every event's per-message ε); a pipeline's ``epsilon``,
    ``delta`` and ``relation``.  ε is recomputed, never read from the transcript's summary."""
    check_binding(metrics, transcript_path)
    led, summary = PrivacyLedger.from_transcript(transcript_path)
    delta = summary["delta"]
    checks: list[Check] = []
    if isinstance(metrics.get("final"), dict):
        checks += _training_checks(metrics, led, delta, parse_transcript(read_limited(transcript_path),
                                                                         str(transcript_path)).version)
    else:
        checks += [("epsilon", metrics.get("epsilon", "<absent>"), led.epsilon(delta)),
                   ("delta", metrics.get("delta", "<absent>"), delta),
                   ("relation", metrics.get("relation", "<absent>"), led.relation)]
    for name, have, want in checks:
        if not _agrees(have, want):
            raise TranscriptError(f"the metrics' {name} is {short_repr(have)}, but replaying {transcript_path} gives "
                                  f"{want!r}")


def _training_checks(metrics: dict[str, Any], led: PrivacyLedger, delta: float, version: int) -> list[Check]:
    """A training run's ε-bearing fields (see :func:`check_metrics`) beside what the ledger gives."""
    final, cfg, rounds = metrics["final"], _object(metrics.get("config")), metrics.get("rounds")
    if not isinstance(rounds, list) or not all(isinstance(r, dict) for r in rounds):
        raise TranscriptError("the metrics' rounds must be a list of round records")
    planned = None if led.plan is None else sum(n for _, n in led.plan)
    checks: list[Check] = [("final.epsilon_total", final.get("epsilon_total", "<absent>"), led.epsilon(delta)),
                           ("final.delta", final.get("delta", "<absent>"), delta),
                           ("config.delta", cfg.get("delta", "<absent>"), delta),
                           ("config.rounds", cfg.get("rounds", "<absent>"), planned if planned is not None
                            else cfg.get("rounds")),
                           ("rounds (how many)", len(rounds), cfg.get("rounds") if led.complete else len(rounds))]
    for e in led.entries:
        if e.event.kind != "non_private":
            pure = e.event.pure_epsilon()
            checks.append(("config.epsilon (per message)", cfg.get("epsilon"), f"a {e.event.kind} event" if pure is None
                           else pure))
    return checks + (_round_checks(rounds, led, delta) if version >= CHAINED_FROM else [])


def _round_checks(rounds: list[dict[str, Any]], led: PrivacyLedger, delta: float) -> list[Check]:
    """The round of each charge (``meta.round``: increasing, one of the metrics' rounds) and each round's
    ``epsilon_spent`` beside the ε of the charges up to that round."""
    out: list[Check] = []
    last = 0
    for e in led.entries:
        t = e.meta.get("round")
        if isinstance(t, int) and not isinstance(t, bool) and last < t <= len(rounds):
            out.append(("rounds (the round of a charge)", t, t))
            last = t
        else:
            out.append(("rounds (the round of a charge)", t, f"a round in {last + 1}..{len(rounds)}"))
    k, done = 0, {0: PrivacyLedger(led.relation, led.discretization).epsilon(delta)}
    for i, r in enumerate(rounds, 1):
        while k < len(led.entries) and led.entries[k].meta.get("round") == i:
            k += 1
        if k not in done:
            done[k] = PrivacyLedger(led.relation, led.discretization, led.entries[:k]).epsilon(delta)
        out.append((f"rounds[{i - 1}].epsilon_spent", r.get("epsilon_spent", "<absent>"), done[k]))
    return out


def _agrees(have: Any, want: Any) -> bool:
    """Whether a metrics value agrees with the replayed one: ε to the replay tolerance (``None`` = ∞), else equal."""
    if isinstance(want, float) and not isinstance(have, bool):
        have = math.inf if have is None else have
        return isinstance(have, int | float) and epsilon_close(float(have), want)
    return type(have) is type(want) and have == want


def _object(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def read_metrics(path: str | Path) -> dict[str, Any]:
    """A ``metrics.json`` as a JSON object (:class:`TranscriptError` if unreadable or not one)."""
    data = read_limited(path, "metrics file")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # invalid JSON or UTF-8, very deep nesting
        raise TranscriptError(f"{path} is not a JSON metrics file ({type(exc).__name__})") from exc
    if not isinstance(obj, dict):
        raise TranscriptError(f"{path} is not a JSON object")
    return obj
