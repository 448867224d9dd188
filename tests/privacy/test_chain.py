"""The hash-chained transcript and ``replay --metrics`` (issue 24, finding 2).

Before: a transcript edited (an event line's count or ε lowered, a line deleted, an event replaced by a
public one), with its summary and the sha256 in ``metrics.json`` recomputed, replayed as a match with a
smaller ε, and ``--metrics`` compared neither ``final.epsilon_total``, δ, the relation nor the rounds.
Now every line after the header carries the sha256 of the line before it (an edit, deletion or insertion
is refused naming the line after it), and ``--metrics`` checks every ε-bearing field against the replay.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from sstq_fl.cli import main
from sstq_fl.fl.engine import RunConfig, run
from sstq_fl.privacy.errors import TranscriptError
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.replay import check_metrics, replay, transcript_binding
from sstq_fl.privacy.transcript import line_hash

from .test_replay import rechained

LSQ = dict(task="lsq", dim=8, n=100, clients=5, batch=10, clip=1.0, lr=0.5, rounds=3, encoder="sqkr")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A completed 3-round LDP run at ε = 3 per message (ε 9 in all)."""
    out = tmp_path_factory.mktemp("run")
    run(RunConfig(**LSQ), out, progress=False)  # type: ignore[arg-type]
    return out


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(s) for s in path.read_text().splitlines()]


def forged(out: Path, tmp: Path, edit: Any, chain: bool = False) -> tuple[Path, Path]:
    """The run's transcript after ``edit`` (its lines, the summary's ε and event count recomputed as a forger
    would; ``chain``: the hash chain recomputed too) and its metrics with the new sha256; their paths."""
    lines = lines_of(out / "transcript.jsonl")
    edit(lines)
    events = [ln for ln in lines if ln.get("type") == "event"]
    lines[-1].update(events=sum(e["count"] for e in events), epsilon=sum(e["count"] * e["event"].get("epsilon", 0)
                                                                         for e in events))
    path = tmp / "transcript.jsonl"
    text = rechained(lines) if chain else "".join(json.dumps(ln) + "\n" for ln in lines)
    path.write_text(text)
    if chain:  # a forger who rewrites every line recomputes ε exactly too
        lines[-1]["epsilon"] = replay(path)["epsilon"]
        path.write_text(rechained(lines))
    metrics = json.loads((out / "metrics.json").read_text())
    metrics["privacy_transcript"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    metrics["privacy_transcript"]["epsilon"] = lines[-1]["epsilon"]
    (tmp / "metrics.json").write_text(json.dumps(metrics))
    return path, tmp / "metrics.json"


def refused(capsys: pytest.CaptureFixture[str], path: Path, metrics: Path, words: str) -> None:
    assert main(["privacy", "replay", str(path), "--metrics", str(metrics)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sstq-fl: error: ") and words in err, err


EDITS = {
    "an event's epsilon 3 -> 1": (lambda ls: ls[2]["event"].update(epsilon=1.0), "line 4: the hash chain breaks"),
    "a line deleted (3 events -> 2)": (lambda ls: ls.pop(2), "line 3: the hash chain breaks"),
    "a line inserted": (lambda ls: ls.insert(2, copy.deepcopy(ls[1])), "line 3: the hash chain breaks"),
    "an event replaced by a public one": (lambda ls: ls[1].update(event={"kind": "public", "description": ""},
                                                                  subset="public"), "line 3: the hash chain breaks"),
    "the last event deleted": (lambda ls: ls.pop(3), "line 4: the hash chain breaks"),
}


@pytest.mark.parametrize("name", EDITS)
def test_an_edited_transcript_with_recomputed_summary_and_digest_is_refused_naming_the_line(
        finished, tmp_path, capsys, name):
    edit, words = EDITS[name]
    path, metrics = forged(finished, tmp_path, edit)
    refused(capsys, path, metrics, words)
    with pytest.raises(TranscriptError, match=words):
        replay(path)


def test_the_chain_head_commits_to_every_line(finished):
    texts = (finished / "transcript.jsonl").read_text().splitlines()
    assert "prev" not in json.loads(texts[0])
    for before, line in zip(texts, texts[1:]):
        assert json.loads(line)["prev"] == line_hash(before)


FIELDS = {
    "final.epsilon_total": lambda m: m["final"].update(epsilon_total=6.0),
    "final.delta": lambda m: m["final"].update(delta=1e-3),
    "config.delta": lambda m: m["config"].update(delta=1e-3),
    "config.rounds": lambda m: m["config"].update(rounds=1),
    "config.epsilon (per message)": lambda m: m["config"].update(epsilon=1.0),
    "rounds[1].epsilon_spent": lambda m: m["rounds"][1].update(epsilon_spent=3.0),
    "rounds (how many)": lambda m: m["rounds"].pop(),
}


@pytest.mark.parametrize("name", FIELDS)
def test_replay_metrics_checks_every_epsilon_bearing_field(finished, tmp_path, capsys, name):
    metrics = json.loads((finished / "metrics.json").read_text())
    check_metrics(metrics, finished / "transcript.jsonl")
    FIELDS[name](metrics)
    (tmp_path / "m.json").write_text(json.dumps(metrics))
    refused(capsys, finished / "transcript.jsonl", tmp_path / "m.json", f"the metrics' {name}")


def test_a_transcript_rewritten_line_by_line_is_caught_by_the_metrics(finished, tmp_path, capsys):
    """Whoever rewrites the whole transcript (chain and summary) but not metrics.json is refused by its ε
    fields; whoever rewrites every file is not (SECURITY.md)."""
    path, metrics = forged(finished, tmp_path, lambda ls: ls.pop(3), chain=True)
    assert replay(path)["matches_recorded"]
    refused(capsys, path, metrics, "final.epsilon_total is 8.99")


def test_a_pipelines_relation_and_delta_are_checked(tmp_path, capsys):
    from sstq_fl.privacy.events import GaussianEvent

    led = PrivacyLedger("add_or_remove_one", notes={"run_id": "mepf"})
    led.record(GaussianEvent(2.0), meta={"stage": "release"})
    led.mark_complete()
    led.write_transcript(tmp_path / "t.jsonl", delta=1e-5)
    m = {"epsilon": led.epsilon(1e-5), "delta": 1e-5, "relation": "add_or_remove_one",
         "privacy_transcript": transcript_binding(tmp_path / "t.jsonl")}
    check_metrics(m, tmp_path / "t.jsonl")
    for key, value in (("relation", "replace_one"), ("delta", 0.9), ("epsilon", 0.47)):
        (tmp_path / "m.json").write_text(json.dumps({**m, key: value}))
        refused(capsys, tmp_path / "t.jsonl", tmp_path / "m.json", f"the metrics' {key} is")


def test_an_unchained_version_2_forgery_is_caught_by_the_metrics(finished, tmp_path, capsys):
    """Versions 1 and 2 still replay, unchained: the forgery that used to pass (an event dropped, the summary
    and the digest recomputed) replays, but ``--metrics`` refuses an unchained transcript outright."""
    def downgrade_and_drop(ls: list[dict[str, Any]]) -> None:
        ls[0]["version"] = 2
        for ln in ls:
            ln.pop("prev", None)
        ls.pop(3)

    path, metrics = forged(finished, tmp_path, downgrade_and_drop)
    lines = lines_of(path)
    lines[-1]["epsilon"] = replay(path)["epsilon"]
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    m = json.loads(metrics.read_text())
    m["privacy_transcript"].update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(), epsilon=lines[-1]["epsilon"])
    metrics.write_text(json.dumps(m))
    assert replay(path)["matches_recorded"]
    refused(capsys, path, metrics, "is a version-2 transcript, without the hash chain")
