"""Resume from the transcript; nothing data-dependent in secure outputs; bad checkpoints (issue 24, findings
1, 4, 6 and 7).

Before: ``--resume`` charged the ledger from the checkpoint's ``joins`` (``[-5] * 20`` gave ε 0 and a
``match`` on replay), secure ``metrics.json`` published ``train_loss`` and ``distance_to_optimum`` and
``checkpoint.json`` per-client join counts, and a checkpoint without ``config``, with a string ``round``,
a top-level list, a non-list ``rounds``, short ``joins`` or a wrongly shaped θ raised a traceback (a NaN θ
was accepted).  Now the ledger of a resumed run is the replay of the transcript prefix the checkpoint names,
each refusal is one line (exit 2) and nothing is written.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sstq_fl.cli import main
from sstq_fl.fl.engine import RunConfig, Trainer, run

FLAGS = ["--task", "lsq", "--dim", "8", "--n", "100", "--clients", "5", "--batch", "10", "--clip", "1", "--lr", "0.5",
         "--rounds", "3", "--encoder", "sqkr"]
CFG = dict(task="lsq", dim=8, n=100, clients=5, batch=10, clip=1.0, lr=0.5, rounds=3, encoder="sqkr")


def stopped_after(out: Path, after: int = 1, log_to: str | None = None, **extra: Any) -> Path:
    """A run of :data:`CFG` (``extra`` overriding it; logging to ``log_to``) stopped after ``after`` rounds (its
    checkpoint and transcript in ``out``)."""
    tr = Trainer(RunConfig(**{**CFG, **extra}))  # type: ignore[arg-type]
    tr.log_to = log_to
    real = tr.run_round

    def stop(st: Any) -> Any:
        if st.round == after:
            raise KeyboardInterrupt
        return real(st)

    tr.run_round = stop  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        tr.train(out, progress=False)
    return out


def files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def edit_checkpoint(out: Path, fn: Any) -> None:
    ck = json.loads((out / "checkpoint.json").read_text())
    (out / "checkpoint.json").write_text(json.dumps(fn(ck)))


def save_theta(out: Path, arr: np.ndarray) -> None:
    name = json.loads((out / "checkpoint.json").read_text())["theta_file"]
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    (out / name).write_bytes(buf.getvalue())


def theta(out: Path) -> np.ndarray:
    return np.load(out / json.loads((out / "checkpoint.json").read_text())["theta_file"])


def test_join_counts_in_a_checkpoint_no_longer_change_epsilon(tmp_path, capsys):
    out = stopped_after(tmp_path / "k")
    capsys.readouterr()
    for joins in ([-5] * 5, [0] * 5):
        edit_checkpoint(out, lambda ck, j=joins: {**ck, "joins": j})
        before = files(out)
        assert main(["run", *FLAGS, "--out", str(out), "--resume"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "older format" in err and files(out) == before
        edit_checkpoint(out, lambda ck: {k: v for k, v in ck.items() if k != "joins"})
    assert main(["run", *FLAGS, "--out", str(out), "--resume"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["final"]["epsilon_total"] == pytest.approx(9.0, abs=1e-3)
    assert main(["privacy", "replay", str(out / "transcript.jsonl"), "--metrics", str(out / "metrics.json")]) == 0


@pytest.mark.parametrize("randomness", ["reproducible", "secure"])
def test_a_checkpoint_claiming_more_rounds_than_its_transcript_charged_is_refused(tmp_path, randomness):
    """The transcript holds round 1's charge; a checkpoint claiming 2 rounds names a prefix that does not cover
    them (round 2 had participants and is not charged): refused, one line."""
    out = stopped_after(tmp_path / "k", randomness=randomness)
    edit_checkpoint(out, lambda ck: {**ck, "round": 2, "rounds": ck["rounds"] * 2})
    with pytest.raises(ValueError, match=r"^--resume: .*prefix charges") as exc:
        run(RunConfig(**CFG, randomness=randomness), out, resume=True, progress=False)  # type: ignore[arg-type]
    assert "\n" not in str(exc.value)


def test_a_resumed_transcript_only_appends_and_its_ledger_is_the_replay(tmp_path):
    ref = run(RunConfig(**CFG), tmp_path / "ref", progress=False)  # type: ignore[arg-type]
    out = stopped_after(tmp_path / "k", after=2)
    prefix = (out / "transcript.jsonl").read_text().splitlines()[:-1]
    got = run(RunConfig(**CFG), out, resume=True, progress=False)  # type: ignore[arg-type]
    lines = (out / "transcript.jsonl").read_text().splitlines()
    assert lines[: len(prefix)] == prefix and len(lines) == 5  # header, one charge per round, summary
    assert got["final"]["epsilon_total"] == ref["final"]["epsilon_total"]
    assert [r["epsilon_spent"] for r in got["rounds"]] == [r["epsilon_spent"] for r in ref["rounds"]]


BAD: dict[str, tuple[Any, str]] = {
    "no config": (lambda o: edit_checkpoint(o, lambda ck: {k: v for k, v in ck.items() if k != "config"}),
                  "missing field(s) ['config']"),
    "a string round": (lambda o: edit_checkpoint(o, lambda ck: {**ck, "round": "1"}), "round must be an integer"),
    "a top-level list": (lambda o: edit_checkpoint(o, lambda ck: [ck]), "not a checkpoint (a JSON list"),
    "a non-list rounds": (lambda o: edit_checkpoint(o, lambda ck: {**ck, "rounds": {"1": {}}}), "rounds must be a list"),
    "short joins": (lambda o: edit_checkpoint(o, lambda ck: {**ck, "joins": [1]}), "older format"),
    "a round past the run": (lambda o: edit_checkpoint(o, lambda ck: {**ck, "round": 7}), "round must be an integer"),
    "not JSON": (lambda o: (o / "checkpoint.json").write_text("{"), "is not a JSON checkpoint"),
    "θ of two dimensions": (lambda o: save_theta(o, np.zeros((8, 2))), "not θ (float64 (8,))"),
    "θ one too long": (lambda o: save_theta(o, np.zeros(9)), "not θ (float64 (8,))"),
    "θ a scalar": (lambda o: save_theta(o, np.float64(1.0)), "not θ"),
    "θ NaN": (lambda o: save_theta(o, np.full(8, np.nan)), "non-finite values"),
    "θ not an array file": (lambda o: save_theta(o, np.zeros(8)) or
                            (o / json.loads((o / "checkpoint.json").read_text())["theta_file"]).write_bytes(b"x"),
                            "cannot read the model file"),
    "another transcript prefix": (lambda o: edit_checkpoint(o, lambda ck: {**ck, "transcript": {"lines": 2,
                                                                                               "sha256": "0" * 64}}),
                                  "does not hold the transcript prefix"),
    "an edited transcript": (lambda o: (o / "transcript.jsonl").write_text(
        (o / "transcript.jsonl").read_text().replace('"epsilon": 3.0', '"epsilon": 1.0', 1)), "hash chain breaks"),
}


@pytest.mark.parametrize("name", BAD)
def test_a_bad_checkpoint_is_one_line_and_nothing_is_written(tmp_path, capsys, name):
    out = stopped_after(tmp_path / "k")
    if name.startswith("θ"):
        assert theta(out).dtype == np.float64 and theta(out).shape == (8,)
    spoil, words = BAD[name]
    spoil(out)
    before, _ = files(out), capsys.readouterr()
    assert main(["run", *FLAGS, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sstq-fl: error: ") and words in err, err
    assert "Traceback" not in err and files(out) == before


def test_secure_outputs_hold_nothing_computed_on_the_pooled_data(tmp_path):
    cfg = RunConfig(**CFG, randomness="secure", sampling_rate=0.6)  # type: ignore[arg-type]
    m = run(cfg, tmp_path / "s", progress=False, keep_checkpoints=True)
    text = (tmp_path / "s" / "metrics.json").read_text()
    assert "train_loss" not in text and "distance_to_optimum" not in text and "non_private_diagnostics" not in m
    ck = json.loads((tmp_path / "s" / "checkpoint.json").read_text())
    assert "joins" not in ck and not any("train_loss" in r or "distance_to_optimum" in r for r in ck["rounds"])
    assert not (tmp_path / "s" / "pooled_diagnostics.json").exists()
    for line in (tmp_path / "s" / "transcript.jsonl").read_text().splitlines()[1:-1]:
        assert set(json.loads(line).get("meta", {})) <= {"round"}  # no client ids, no counts per client
    plain = run(RunConfig(**CFG), tmp_path / "r", progress=False)  # type: ignore[arg-type]
    assert "train_loss" in plain["rounds"][-1] and "distance_to_optimum" in plain["rounds"][-1]


def test_pooled_diagnostics_go_to_their_own_labelled_file(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["run", *FLAGS, "--randomness", "secure", "--pooled-diagnostics", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert "train_loss" not in json.dumps(m)
    d = json.loads((out / "pooled_diagnostics.json").read_text())
    assert d["run_id"] == m["privacy_transcript"]["run_id"] and "non-private" in d["note"]
    assert [r["round"] for r in d["rounds"]] == [1, 2, 3] and all("train_loss" in r for r in d["rounds"])
    assert main(["run", *FLAGS, "--pooled-diagnostics", "--out", str(tmp_path / "r")]) == 2
    assert "randomness=secure only" in capsys.readouterr().err


def test_a_secure_run_resumes_with_its_pooled_diagnostics(tmp_path):
    out = stopped_after(tmp_path / "k", randomness="secure", pooled_diagnostics=True)
    run(RunConfig(**CFG, randomness="secure", pooled_diagnostics=True), out, resume=True,  # type: ignore[arg-type]
        progress=False)
    d = json.loads((out / "pooled_diagnostics.json").read_text())
    assert [r["round"] for r in d["rounds"]] == [1, 2, 3]
