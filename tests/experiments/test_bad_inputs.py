"""Bad experiment files, --set items and sweep options: one line on stderr, exit 2, nothing written."""

import json
import os
from pathlib import Path

import pytest

from sstq_fl.cli import main
from sstq_fl.experiments.spec import parse_experiment
from sstq_fl.experiments.sweep import SweepOptions, sweep
from sstq_fl.io import atomic_write_bytes, clean_temps

BASE = 'task = "lsq"\nrounds = 1\nclients = 2\ndim = 4\nn = 20\nbatch = 4\n'


def _refused(tmp_path: Path, capsys, text: str, *extra: str, match: str) -> None:
    f = tmp_path / "e.toml"
    f.write_text(text)
    out = tmp_path / "out"
    assert main(["sweep", str(f), "--out", str(out), "--executor", "local", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and match in err, err
    assert not out.exists()


@pytest.mark.parametrize("text, match", [
    ("a = " + "[" * 50000 + "]" * 50000 + "\n", "nested too deep"),
    ("a = " + "{b=" * 3000 + "1" + "}" * 3000 + "\n", "nested too deep"),
    (BASE + "[task_params]\nx = " + "[" * 40 + "]" * 40 + "\n", "nested too deep"),
    (BASE.replace("rounds = 1", "sampling-rate = 1.0\nsampling_rate = 0.5\nrounds = 1"), "'sampling-rate' and 'sampling_rate'"),
    (BASE + '[experiment]\ntitle = ["a", "b"]\n', "title must be a string"),
    (BASE + "seed = -1\n", "seed must be an integer in [0, 2**63)"),
    (BASE + "seed = [0, -7]\n", "seed must be an integer in [0, 2**63)"),
    (BASE + "seed = [0, 0]\n", "lists 0 twice"),
    (BASE.replace("dim = 4", "dim = 100000000000"), "beyond the"),
    (BASE + "[task_params]\nrecords = 5\n", "takes no task params"),
    (BASE + "budget-epsilon = 0.5\n", "exceeds the budget"),
    (BASE + "seed = " + str(list(range(1000))) + "\nbatch = " + str(list(range(1, 1001))) + "\n", "1,000,000 cells"),
    (BASE + 'encoder = ["sstq-flat", "sstq-flat:b=4"]\n', "again"),
])
def test_a_bad_file_is_refused_before_anything_is_written(tmp_path, capsys, text, match) -> None:
    _refused(tmp_path, capsys, text.replace("batch = 4\nseed", "seed").replace("batch = 4\n", "", 1)
             if "batch = [" in text else text, match=match)


@pytest.mark.parametrize("items, match", [
    (["rounds=99999999999999999999"], "at most 10000000"),
    (["rounds=1\nclients=3"], "no newlines"),
    (["rounds=1", "rounds=2"], "one option (rounds)"),
    (["sampling-rate=1", "sampling_rate=0.5"], "one option (sampling-rate)"),
    (["experiment={title='x'}"], "not settable"),
    (["task_params={records=5}"], "takes no task params"),
    (["nosuchkey=1"], "unknown key 'nosuchkey'"),
])
def test_a_bad_set_is_refused_by_name(tmp_path, capsys, items, match) -> None:
    _refused(tmp_path, capsys, BASE, *[a for i in items for a in ("--set", i)], match=match)


def test_set_takes_task_params_as_an_inline_table() -> None:
    from sstq_fl.experiments.cli import parse_overrides

    assert parse_overrides(["task_params={records=5}"], "e.toml") == {"task_params": '{"records": 5}'}


def test_max_cells_allows_a_larger_grid(tmp_path) -> None:
    exp = parse_experiment((BASE + "seed = [0, 1, 2]\n").encode(), "e.toml")
    with pytest.raises(ValueError, match="3 cells"):
        sweep(exp, tmp_path / "o", SweepOptions(executor="local", max_cells=2))
    assert not (tmp_path / "o").exists()


def test_an_empty_out_is_refused(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e.toml").write_text(BASE)
    with pytest.raises(SystemExit) as e:
        main(["sweep", "e.toml", "--out", "", "--executor", "local"])
    assert e.value.code == 2 and os.listdir(tmp_path) == ["e.toml"]


def test_compare_refuses_an_encoder_given_twice(tmp_path, capsys) -> None:
    argv = ["compare", "--task", "lsq", "--dim", "4", "--n", "20", "--clients", "2", "--batch", "4", "--rounds", "1",
            "--encoders", "sstq-flat:b=4 sstq-flat:b=4", "--out", str(tmp_path / "c")]
    assert main(argv) == 2
    assert "'sstq-flat:b=4' is 'sstq-flat:b=4' again" in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_stale_temporaries_are_named_and_removed(tmp_path) -> None:
    atomic_write_bytes(tmp_path / "a.json", b"{}")
    dead = tmp_path / "cells" / ".metrics.json.tmp-999999999-abc123"
    live = tmp_path / f".x.json.tmp-{os.getpid()}-abc"
    dead.parent.mkdir()
    dead.write_bytes(b"")
    live.write_bytes(b"")
    assert clean_temps(tmp_path) == [dead] and live.exists()
    assert clean_temps(tmp_path, everything=True) == [live]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.json", "cells"]


def test_every_session_is_recorded_and_a_sweep_killed_before_its_first_cell_resumes(tmp_path) -> None:
    exp = parse_experiment(BASE.encode(), "e.toml")
    out = tmp_path / "o"
    out.mkdir()
    (out / ".sstq-fl-kind").write_text('{"kind": "sweep"}')  # claimed, then killed before sweep.json or cells/
    for _ in range(2):
        (out / "sweep.json").unlink(missing_ok=True) if _ == 0 else None
        sweep(exp, out, SweepOptions(executor="local", resume=True))
    doc = json.loads((out / "sweep.json").read_text())
    assert [s["status"] for s in doc["sessions"]] == ["completed", "completed"]
