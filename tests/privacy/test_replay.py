"""``privacy replay`` refuses every malformed or inconsistent transcript with one line (issue item 4).

Each case below is a transcript the pre-strict reader accepted with a wrong number or crashed on
(KeyError, TypeError, AttributeError, OverflowError, RecursionError, MemoryError).  The library
raises :class:`TranscriptError`; the CLI prints one ``sstq-fl: error:`` line and exits 2.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sstq_fl.cli import main
from sstq_fl.privacy.errors import MAX_EVENTS, Budget, TranscriptError
from sstq_fl.privacy.events import GaussianEvent, PublicDataEvent, PureDpEvent
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.replay import check_binding, replay, transcript_binding
from sstq_fl.privacy.transcript import REPLAY_RTOL, TRANSCRIPT_VERSION, line_hash

Lines = list[dict[str, Any]]
STEP = PureDpEvent(0.5)


def planned_ledger(recorded: int = 30, complete: bool = False) -> PrivacyLedger:
    led = PrivacyLedger(notes={"run_id": "run-a"})
    led.start([(STEP, 100)], Budget(40.0, 1e-5))
    led.record(STEP, recorded)
    if complete:
        led.mark_complete()
    return led


def rechained(lines: Lines) -> str:
    """``lines`` as transcript text, hash-chained again (``prev`` recomputed, as a writer of every line
    would) where the header is of a chained version, so that each case reaches the check it is about."""
    texts: list[str] = []
    chained = isinstance(lines[0], dict) and lines[0].get("version") == TRANSCRIPT_VERSION
    for line in lines:
        if isinstance(line, dict):
            line = {k: v for k, v in line.items() if k != "prev"}
            if texts and chained:
                line["prev"] = line_hash(texts[-1])
        texts.append(json.dumps(line, allow_nan=True))
    return "".join(t + "\n" for t in texts)


def write(path: Path, lines: Lines) -> Path:
    path.write_text(rechained(lines))
    return path


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> Lines:
    path = tmp_path_factory.mktemp("t") / "valid.jsonl"
    planned_ledger().write_transcript(path, delta=1e-5)
    return [json.loads(s) for s in path.read_text().splitlines()]


def edit(fn: Callable[[Lines], Any]) -> Callable[[Lines], Lines]:
    def apply(lines: Lines) -> Lines:
        out = copy.deepcopy(lines)
        fn(out)
        return out
    return apply


def nested_event(depth: int) -> dict[str, Any]:
    ev: dict[str, Any] = {"kind": "pure_dp", "epsilon": 0.5, "relation": "replace_one"}
    for _ in range(depth):
        ev = {"kind": "poisson_sampled", "sampling_probability": 0.5, "event": ev}
    return ev


# name -> (mutation of the valid transcript's lines, words the one-line error must contain)
CASES: dict[str, tuple[Callable[[Lines], Lines], str]] = {
    "negative count": (edit(lambda ls: ls[1].update(count=-70)), "line 2: event count must be a positive integer"),
    "zero count": (edit(lambda ls: ls[1].update(count=0)), "line 2: event count"),
    "fractional count": (edit(lambda ls: ls[1].update(count=2.5)), "event count"),
    "bool count": (edit(lambda ls: ls[1].update(count=True)), "event count"),
    "string count": (edit(lambda ls: ls[1].update(count="30")), "event count"),
    "huge count": (edit(lambda ls: ls[1].update(count=10**12)), f"at most {MAX_EVENTS}"),
    "count over the limit": (edit(lambda ls: ls[1].update(count=MAX_EVENTS + 1)), f"at most {MAX_EVENTS}"),
    "unknown field in an event line": (edit(lambda ls: ls[1].update(extra=1)), "unknown field(s) ['extra']"),
    "missing field in an event line": (edit(lambda ls: ls[1].pop("subset")), "missing field(s) ['subset']"),
    "unknown key in an event": (edit(lambda ls: ls[1]["event"].update(bogus=1)), "unknown field(s) ['bogus']"),
    "missing key in an event": (edit(lambda ls: ls[1]["event"].pop("relation")), "missing field(s) ['relation']"),
    "string parameter": (edit(lambda ls: ls[1]["event"].update(epsilon="0.5")), "'epsilon' must be a number"),
    "bool parameter": (edit(lambda ls: ls[1]["event"].update(epsilon=True)), "'epsilon' must be a number"),
    "infinite parameter": (edit(lambda ls: ls[1]["event"].update(epsilon=math.inf)), "'epsilon' must be finite"),
    "NaN parameter": (edit(lambda ls: ls[1]["event"].update(epsilon=math.nan)), "'epsilon' must be finite"),
    "huge integer parameter": (edit(lambda ls: ls[1]["event"].update(epsilon=10**400)), "'epsilon' must be finite"),
    "events beyond the plan": (edit(lambda ls: ls[1].update(count=101)), "exceeds the declared plan"),
    "event not in the plan": (edit(lambda ls: ls[1]["event"].update(epsilon=0.25)), "exceeds the declared plan"),
    "summary cut off": (edit(lambda ls: ls.pop()), "no summary line"),
    "summary not last": (edit(lambda ls: ls.append(copy.deepcopy(ls[1]))), "line 4: a line after the summary"),
    "summary twice": (edit(lambda ls: ls.append(copy.deepcopy(ls[-1]))), "line 4: a second summary"),
    "a line that is a list": (edit(lambda ls: ls.insert(1, [1, 2])), "line 2: expected a JSON object, got a list"),
    "a line that is a string": (edit(lambda ls: ls.insert(1, "event")), "line 2: expected a JSON object, got a string"),
    "a line that is a number": (edit(lambda ls: ls.insert(1, 7)), "line 2: expected a JSON object, got a number"),
    "unknown line type": (edit(lambda ls: ls[1].update(type="note")), "unknown line type 'note'"),
    "deeply nested event": (edit(lambda ls: ls[1].update(event=nested_event(40))), "nested more than"),
    "deeply nested notes": (edit(lambda ls: ls[0]["notes"].update(x=json.loads("[" * 200 + "]" * 200))), "nested more"),
    "summary with fewer events than recorded": (edit(lambda ls: ls[-1].update(events=29)), "summary counts 29 events"),
    "summary with another run id": (edit(lambda ls: ls[-1].update(run_id="run-b")), "run_id 'run-b'"),
    "summary with another relation": (edit(lambda ls: ls[-1].update(relation="add_or_remove_one")), "relation"),
    "summary with the wrong accountant": (edit(lambda ls: ls[-1].update(accountant="pld")), "accountant"),
    "summary says complete but stopped early": (edit(lambda ls: ls[-1].update(complete=True)), "stopped_early=True"),
    "summary missing a field": (edit(lambda ls: ls[-1].pop("complete")), "missing field(s) ['complete']"),
    "summary unknown field": (edit(lambda ls: ls[-1].update(verified=True)), "unknown field(s) ['verified']"),
    "summary NaN epsilon": (edit(lambda ls: ls[-1].update(epsilon=math.nan)), "summary epsilon must be finite"),
    "summary negative epsilon": (edit(lambda ls: ls[-1].update(epsilon=-1.0)), "must be non-negative"),
    "summary bool delta": (edit(lambda ls: ls[-1].update(delta=False)), "summary delta must be a number"),
    "header unknown field": (edit(lambda ls: ls[0].update(signed_by="me")), "line 1: unknown field(s)"),
    "header missing plan": (edit(lambda ls: ls[0].pop("plan")), "missing field(s) ['plan']"),
    "header bad version": (edit(lambda ls: ls[0].update(version=True)), "unsupported transcript version"),
    "header zero discretization": (edit(lambda ls: ls[0].update(discretization=0)), "discretization"),
    "header string discretization": (edit(lambda ls: ls[0].update(discretization="1e-4")), "discretization"),
    "plan count negative": (edit(lambda ls: ls[0]["plan"][0].update(count=-1)), "planned count"),
    "plan count fractional": (edit(lambda ls: ls[0]["plan"][0].update(count=100.5)), "planned count"),
    "plan item unknown key": (edit(lambda ls: ls[0]["plan"][0].update(why="x")), "plan item 0"),
    "plan over the budget": (edit(lambda ls: ls[0].update(budget={"epsilon": 1.0, "delta": 1e-5})), "over the budget"),
    "budget bool epsilon": (edit(lambda ls: ls[0].update(budget={"epsilon": True, "delta": 1e-5})), "budget epsilon"),
    "run id not a string": (edit(lambda ls: ls[0]["notes"].update(run_id=7)), "notes.run_id must be a string"),
    "not a transcript": (lambda ls: [{"type": "metrics", "epsilon": 1.0}], "is not an sstq-fl privacy transcript"),
}

RAW: dict[str, tuple[bytes, str]] = {
    "empty file": (b"", "is empty"),
    "blank file": (b"\n\n  \n", "is empty"),
    "invalid JSON": (b'{"type": "header",\n', "not an sstq-fl privacy transcript (line 1 is not JSON"),
    "non-UTF-8": (b'{"type": "header"}\n\xff\xfe\n', "is not UTF-8 text"),
    "binary file": (bytes(range(256)), "is not UTF-8 text"),
    "deep JSON nesting": (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested more than"),
    "duplicate keys": (b'{"type": "header", "type": "header"}\n', "duplicate key 'type'"),
}


def case_path(tmp_path: Path, valid: Lines, name: str) -> tuple[Path, str]:
    path = tmp_path / "t.jsonl"
    if name in RAW:
        path.write_bytes(RAW[name][0])
        return path, RAW[name][1]
    mutate, words = CASES[name]
    return write(path, mutate(valid)), words


@pytest.mark.parametrize("name", [*CASES, *RAW])
def test_malformed_transcript_is_refused_by_the_library(tmp_path, valid, name):
    path, words = case_path(tmp_path, valid, name)
    with pytest.raises(TranscriptError) as info:
        PrivacyLedger.from_transcript(path)
    msg = str(info.value)
    assert words in msg and "\n" not in msg


@pytest.mark.parametrize("name", [*CASES, *RAW])
def test_malformed_transcript_is_refused_by_the_cli_in_one_line(tmp_path, valid, name, capsys):
    path, words = case_path(tmp_path, valid, name)
    assert main(["privacy", "replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sstq-fl: error: ") and err.count("\n") == 1 and words in err


def test_missing_file_is_one_line(tmp_path, capsys):
    with pytest.raises(TranscriptError, match="cannot read transcript"):
        PrivacyLedger.from_transcript(tmp_path / "nope.jsonl")
    assert main(["privacy", "replay", str(tmp_path / "nope.jsonl")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_valid_transcript_replays(tmp_path, valid, capsys):
    path = write(tmp_path / "t.jsonl", valid)
    assert main(["privacy", "replay", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["matches_recorded"] and out["events"] == 30 and out["run_id"] == "run-a" and not out["complete"]


def test_gaussian_too_fine_to_account_is_refused(tmp_path):
    led = PrivacyLedger()
    led.record(PublicDataEvent("phi"))
    led.record(GaussianEvent(2.0))
    path = tmp_path / "g.jsonl"
    led.write_transcript(path)
    lines = [json.loads(s) for s in path.read_text().splitlines()]
    lines[2]["event"]["noise_multiplier"] = 1e-300  # a PLD of ~1e604 points: refused before it is built
    with pytest.raises(TranscriptError, match="privacy-loss distribution of .* points"):
        PrivacyLedger.from_transcript(write(path, lines))
    lines[2]["event"]["noise_multiplier"], lines[2]["count"] = 2.0, 10**6  # ~1e9 points once composed
    lines[-1]["events"] = 10**6 + 1
    with pytest.raises(TranscriptError, match=r"composing 1000000 gaussian"):
        PrivacyLedger.from_transcript(write(path, lines))


def test_nested_self_composition_counts_towards_the_limit(tmp_path, valid):
    lines = copy.deepcopy(valid)
    lines[0]["plan"] = None
    lines[0]["budget"] = None
    for key in ("planned_epsilon",):
        lines[-1].pop(key)
    lines[-1]["stopped_early"] = False
    inner = {"kind": "self_composed", "count": 10**4, "event": lines[1]["event"]}
    lines[1]["event"] = {"kind": "self_composed", "count": 10**4, "event": inner}  # 1e8 executions per line
    lines[1]["count"] = 1
    lines[-1]["events"] = 1
    with pytest.raises(TranscriptError, match=f"stands for 100000000 mechanism executions .limit {MAX_EVENTS}"):
        PrivacyLedger.from_transcript(write(tmp_path / "n.jsonl", lines))


# ---------------------------------------------------------------------- tolerance


def test_recorded_epsilon_is_compared_with_a_relative_tolerance(tmp_path, valid, capsys):
    lines = copy.deepcopy(valid)
    lines[-1]["epsilon"] *= 1 + REPLAY_RTOL / 10  # another machine's last digits
    path = write(tmp_path / "t.jsonl", lines)
    assert main(["privacy", "replay", str(path)]) == 0
    assert "match" in capsys.readouterr().out
    lines[-1]["epsilon"] *= 1 + 10 * REPLAY_RTOL
    write(path, lines)
    assert main(["privacy", "replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and out.count("\n") == 1 and "relative tolerance 1e-06" in out


def test_a_tampered_planned_epsilon_is_a_mismatch(tmp_path, valid):
    lines = copy.deepcopy(valid)
    lines[-1]["planned_epsilon"] = 1.0
    out = replay(write(tmp_path / "t.jsonl", lines))
    assert not out["matches_recorded"] and "planned epsilon" in out["mismatch"]


def test_replay_at_another_delta_does_not_compare(tmp_path, valid):
    out = replay(write(tmp_path / "t.jsonl", valid), delta=1e-6)
    assert "matches_recorded" not in out and out["epsilon"] > replay(tmp_path / "t.jsonl")["epsilon"]
    with pytest.raises(ValueError, match="delta"):
        replay(tmp_path / "t.jsonl", delta=1.5)


def test_version_1_transcripts_still_replay(tmp_path, valid):
    """Transcripts written before run_id/complete were added (committed benchmark results)."""
    lines = copy.deepcopy(valid)
    lines[0]["version"] = 1
    for key in ("run_id", "complete", "accountant"):
        lines[-1].pop(key)
    led, summary = PrivacyLedger.from_transcript(write(tmp_path / "v1.jsonl", lines))
    assert led.complete is False and summary["stopped_early"] is True
    lines[-1]["stopped_early"] = False  # v1 said false for a run that recorded its whole plan
    led, _ = PrivacyLedger.from_transcript(write(tmp_path / "v1.jsonl", lines))
    assert led.complete is True


# ---------------------------------------------------------------------- stopped_early / complete


def test_completed_run_with_sampling_is_not_stopped_early(tmp_path):
    mid = planned_ledger(30)
    assert mid.report(1e-5)["stopped_early"] is True  # a checkpoint written mid-run
    done = planned_ledger(30, complete=True)  # fewer events than planned: clients were sampled
    rep = done.report(1e-5)
    assert rep["stopped_early"] is False and rep["complete"] is True
    path = tmp_path / "done.jsonl"
    done.write_transcript(path, delta=1e-5)
    back, summary = PrivacyLedger.from_transcript(path)
    assert back.complete and summary["stopped_early"] is False and back.report(1e-5) == rep
    with pytest.raises(ValueError, match="marked complete"):
        done.record(STEP)


def test_ledger_without_plan_never_stopped_early():
    led = PrivacyLedger()
    led.record(STEP, 3)
    assert led.report(1e-5)["stopped_early"] is False


def test_record_refuses_bool_and_huge_counts_and_skips_zero():
    led = PrivacyLedger()
    for bad in (True, -1, 2.0, MAX_EVENTS + 1):
        with pytest.raises(ValueError, match="count"):
            led.record(STEP, bad)  # type: ignore[arg-type]
    led.record(STEP, 0)
    assert led.entries == []
    led.record(STEP, MAX_EVENTS)
    with pytest.raises(ValueError, match=f"past {MAX_EVENTS}"):
        led.record(PublicDataEvent(), 1)
    assert led.epsilon(1e-5) > 0  # 10^7 pure rounds answer quickly (windowed exact composition)


def test_write_without_delta_still_writes_the_summary(tmp_path):
    led = PrivacyLedger()
    led.record(STEP, 2)
    path = tmp_path / "t.jsonl"
    led.write_transcript(path)
    _, summary = PrivacyLedger.from_transcript(path)
    assert summary["delta"] == 1e-5


# ---------------------------------------------------------------------- binding


def bound_run(tmp_path: Path, run_id: str) -> tuple[Path, dict[str, Any]]:
    led = PrivacyLedger(notes={"run_id": run_id})
    led.record(STEP, 5 if run_id == "run-a" else 6)
    led.mark_complete()
    path = tmp_path / f"{run_id}.jsonl"
    digest = led.write_transcript(path, delta=1e-5)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    metrics = {"epsilon": led.epsilon(1e-5), "delta": 1e-5, "relation": led.relation,
               "privacy_transcript": transcript_binding(path)}
    (tmp_path / f"{run_id}.metrics.json").write_text(json.dumps(metrics))
    return path, metrics


def test_binding_names_run_and_digest(tmp_path):
    path, metrics = bound_run(tmp_path, "run-a")
    b = metrics["privacy_transcript"]
    assert set(b) == {"run_id", "sha256", "epsilon", "delta"} and b["run_id"] == "run-a" and b["delta"] == 1e-5
    assert b["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    check_binding(metrics, path)
    _, summary = PrivacyLedger.from_transcript(path)
    assert summary["run_id"] == "run-a"


def test_binding_refuses_another_runs_transcript(tmp_path, capsys):
    a, ma = bound_run(tmp_path, "run-a")
    b, _ = bound_run(tmp_path, "run-b")
    with pytest.raises(TranscriptError, match="belongs to run 'run-b'"):
        check_binding(ma, b)
    tampered = copy.deepcopy(ma)
    tampered["privacy_transcript"]["sha256"] = "0" * 64
    with pytest.raises(TranscriptError, match="not the transcript bound"):
        check_binding(tampered, a)
    tampered = copy.deepcopy(ma)
    tampered["privacy_transcript"]["epsilon"] = 1.0
    with pytest.raises(TranscriptError, match="metrics record epsilon 1.0"):
        check_binding(tampered, a)
    with pytest.raises(TranscriptError, match="no privacy_transcript binding"):
        check_binding({"epsilon": 1.0}, a)
    ma_path = str(tmp_path / "run-a.metrics.json")
    assert main(["privacy", "replay", str(a), "--metrics", ma_path]) == 0
    assert "bound to" in capsys.readouterr().out
    assert main(["privacy", "replay", str(b), "--metrics", ma_path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "belongs to run 'run-b'" in err
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["privacy", "replay", str(a), "--metrics", str(tmp_path / "bad.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_binding_of_a_non_private_run_is_json(tmp_path):
    from sstq_fl.privacy.events import NonPrivateEvent

    led = PrivacyLedger(notes={"run_id": "clean"})
    led.record(NonPrivateEvent())
    path = tmp_path / "c.jsonl"
    led.write_transcript(path)
    b = transcript_binding(path)
    assert b["epsilon"] is None and json.loads(json.dumps(b, allow_nan=False)) == b
    check_binding({"privacy_transcript": b}, path)


def test_many_distinct_events_are_refused_not_computed_for_minutes(tmp_path, monkeypatch):
    """Each distinct Gaussian costs a PLD of its own: the total work is bounded too (lowered here)."""
    from sstq_fl.privacy import pld as pld_module

    led = PrivacyLedger(discretization=1e-2)
    for i in range(30):
        led.record(GaussianEvent(2.0 + i / 100))
    path = tmp_path / "many.jsonl"
    led.write_transcript(path)
    monkeypatch.setattr(pld_module, "MAX_PLD_WORK", 2**17)
    with pytest.raises(TranscriptError, match="too many distinct events to account"):
        PrivacyLedger.from_transcript(path)


def test_endless_files_are_read_only_up_to_the_limit(capsys):
    assert main(["privacy", "replay", "/dev/zero"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "byte limit of a transcript" in err
