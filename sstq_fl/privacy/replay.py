"""Replay and binding: a transcript recomputed alone, and a run's metrics tied to its transcript.

:func:`replay` rebuilds the ledger from a transcript (strictly,
:meth:`~sstq_fl.privacy.ledger.PrivacyLedger.from_transcript`), recomputes ε and compares it with
the recorded one to the relative tolerance :data:`~sstq_fl.privacy.transcript.REPLAY_RTOL`.
:func:`transcript_binding` / :func:`check_binding` bind a run's ``metrics.json`` to its
transcript by run id and sha256, and :func:`check_metrics` checks every privacy-bearing field of the
metrics against the replayed ledgers, local and central (:mod:`sstq_fl.privacy.run_metrics`).
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
from .run_metrics import CENTRAL_TRUSTS, central_checks, training_checks
from .transcript import CHAINED_FROM, REPLAY_RTOL, epsilon_close, parse_transcript, read_limited

CENTRAL_TRANSCRIPT = "transcript_central.jsonl"  # a trusted stage's transcript, beside the run's own


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
    any privacy-bearing field disagrees with the replayed transcripts.

    A training run: final ε and δ, the plan, each round's ε and the rounds charged, per-message ε, the
    randomness mode, sampling rate, encoder, trust and threat model (bound to the transcript's notes),
    the amplified ε (recomputed), and with a trust model the central ε, final and per round, against
    ``transcript_central.jsonl``; ``transcript_path`` may be either transcript, and both must lie in one
    folder.  A pipeline: ``epsilon``, ``delta``, ``relation`` and ``randomness`` (the transcript's notes).
    ε is recomputed, never read from a summary; an unchained transcript (version < :data:`CHAINED_FROM`)
    is refused."""
    local, central = _run_transcripts(metrics, Path(transcript_path))
    led, summary = _chained_ledger(local)
    delta = summary["delta"]
    if isinstance(metrics.get("final"), dict):
        if not isinstance(metrics.get("rounds"), list) or not all(isinstance(r, dict) for r in metrics["rounds"]):
            raise TranscriptError("the metrics' rounds must be a list of round records")
        cled = _chained_ledger(central)[0] if central is not None else None
        checks = training_checks(metrics, led, delta) + central_checks(metrics, led, cled, delta)
    else:
        checks = [("epsilon", metrics.get("epsilon", "<absent>"), led.epsilon(delta)),
                  ("delta", metrics.get("delta", "<absent>"), delta),
                  ("relation", metrics.get("relation", "<absent>"), led.relation),
                  ("randomness", metrics.get("randomness", "<absent>"), led.notes.get("randomness", "<absent>"))]
    for name, have, want in checks:
        if not _agrees(have, want):
            raise TranscriptError(f"the metrics' {name} is {short_repr(have)}, but replaying {transcript_path} gives "
                                  f"{want!r}")


def _run_transcripts(metrics: dict[str, Any], path: Path) -> tuple[Path, Path | None]:
    """The run's local transcript and, where its notes name a trust model, its central one, each checked
    against its binding in ``metrics``; ``path`` may name either (the other lies beside it)."""
    final = metrics.get("final") if isinstance(metrics, dict) else None
    central_entry = final.get("epsilon_central") if isinstance(final, dict) else None
    cbind = central_entry.get("binding") if isinstance(central_entry, dict) else None
    local = path
    if path.name == CENTRAL_TRANSCRIPT or (isinstance(cbind, dict) and cbind.get("sha256") ==
                                           transcript_binding(path)["sha256"]):
        local = path.parent / "transcript.jsonl"
    check_binding(metrics, local)
    trust = parse_transcript(read_limited(local), str(local)).notes.get("trust")
    if trust not in CENTRAL_TRUSTS:
        if local != path:
            raise TranscriptError(f"the metrics' config.trust is {short_repr(trust)}: {path} is no central transcript "
                                  f"of this run")
        return local, None
    central = path.parent / CENTRAL_TRANSCRIPT
    if not isinstance(cbind, dict):
        raise TranscriptError("the metrics' final.epsilon_central carries no binding to the central transcript")
    try:
        check_binding({"privacy_transcript": cbind}, central)
    except TranscriptError as exc:
        raise TranscriptError(f"the metrics' final.epsilon_central.binding: {exc}") from None
    return local, central


def _chained_ledger(path: Path) -> tuple[PrivacyLedger, dict[str, Any]]:
    """The replayed ledger of a hash-chained transcript (an older, unchained one refused for ``--metrics``)."""
    version = parse_transcript(read_limited(path), str(path)).version
    if version < CHAINED_FROM:
        raise TranscriptError(f"{path} is a version-{version} transcript, without the hash chain: replay --metrics "
                              f"checks version {CHAINED_FROM} or later only")
    return PrivacyLedger.from_transcript(path)


def _agrees(have: Any, want: Any) -> bool:
    """Whether a metrics value agrees with the replayed one: ε to the replay tolerance (``None`` = ∞), else equal."""
    if isinstance(want, float) and not isinstance(have, bool):
        have = math.inf if have is None else have
        return isinstance(have, int | float) and epsilon_close(float(have), want)
    return type(have) is type(want) and have == want


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
