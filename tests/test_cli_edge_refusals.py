"""Bad inputs of the commands the first campaigns left out (gen, bench, plot, run --resume): each refused in one
line with exit 2 before anything is read, computed or charged, and nothing written.  The whole campaign is
``benchmarks/bad_input_campaign.py`` (its ``more`` surface: ``benchmarks/bad_input_cases_more.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sstq_fl.cli import main

GEN = ["--records", "200", "--public-records", "200", "--eval-samples", "100", "--epsilon", "1"]


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], words: str) -> str:
    """``argv`` exits 2 with one stderr line holding ``words`` (INFO log lines would be more lines)."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("pipe", ["dp-mepf", "dp-vqg", "straightdp"])
def test_gen_refuses_an_empty_out_and_a_folder_as_its_data_set_ledger(pipe, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["gen", pipe, *GEN, "--out", ""])
    assert "expected a folder path" in capsys.readouterr().err
    (tmp_path / "L").mkdir()
    refused(["gen", pipe, *GEN, "--dataset-ledger", "L", "--out", "o"], capsys, "--dataset-ledger L is not a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["L"]


def test_gen_refuses_bad_inception_weights_and_an_over_budget_run_before_spending(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    led = ["--dataset-ledger", "led.jsonl", "--out", "o"]
    refused(["gen", "dp-mepf", *GEN, "--inception-weights", "nope.pth", *led], capsys, "no such file")
    Path("w.pth").write_bytes(b"\x80garbage" * 100)
    refused(["gen", "dp-mepf", *GEN, "--inception-weights", "w.pth", *led], capsys, "cannot read Inception weights")
    refused(["gen", "dp-vqg", *GEN, "--dataset-budget-epsilon", "0.5", *led], capsys, "over the data set's budget 0.5")
    refused(["gen", "dp-vqg", *GEN, "--batch", "5000", *led], capsys, "--batch 5000 is above the 200 records")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pth"]  # no ledger, no output folder


def test_bench_refuses_empty_items_negative_seeds_and_bad_input_files_first(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "mse-vs-dim", "--dims", "8,,8", "--out", str(tmp_path / "e1.json")])
    assert "no empty item" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "kashin-search", "--dims", "8", "--seed", "-1", "--out", str(tmp_path / "k.json")])
    assert "expected a seed" in capsys.readouterr().err
    out = ["--rounds", "2", "--out", str(tmp_path / "s.json")]
    refused(["bench", "shuffle", *out, "--reference", "nope.csv"], capsys, "--reference is drawn beside --sweep")
    (tmp_path / "f.csv").write_text("a,b\n1,2\n")
    refused(["bench", "shuffle", *out, "--sweep", str(tmp_path / "f.csv")], capsys, "no column 'metric_name'")
    refused(["bench", "shuffle", *out, "--sweep", str(tmp_path / "nope.csv")], capsys, "cannot read")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.csv"]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sw")
    (root / "g.toml").write_text('task = "lsq"\ndim = 4\nn = 40\nclients = 2\nrounds = 2\nencoder = ["sqkr", "vqsgd"]\n')
    assert main(["sweep", str(root / "g.toml"), "--out", str(root / "o"), "--executor", "local"]) == 0
    return root / "o"


@pytest.mark.parametrize("edit,words", [
    (lambda d: [1, 2], "not an object"),
    (lambda d: {**d, "rows": 3}, "'rows' is int"),
    (lambda d: {**d, "axes": [1]}, "'axes' is list"),
    (lambda d: {**d, "final": None}, "'final' is NoneType"),
    (lambda d: {**d, "rows": [1]}, "not an object"),
    (lambda d: {**d, "rows": [{**d["rows"][0], "round": "1"}] + d["rows"][1:]}, "rows are not a sweep's rows"),
    (lambda d: {**d, "aggregates": [{**a, "metric_mean": 0.5} for a in d["aggregates"]]}, "not what its rows give"),
    (lambda d: {k: v for k, v in d.items() if k != "final"}, "'final' is NoneType"),
])
def test_plot_refuses_a_results_file_that_is_not_what_a_sweep_wrote(edit, words, sweep_dir, tmp_path, capsys):
    d = tmp_path / "o"
    shutil.copytree(sweep_dir, d)
    (d / "results.json").write_text(json.dumps(edit(json.loads((d / "results.json").read_text()))))
    refused(["plot", str(d)], capsys, words)


def test_plot_refuses_duplicate_keys_and_deep_nesting(sweep_dir, tmp_path, capsys):
    d = tmp_path / "o"
    shutil.copytree(sweep_dir, d)
    (d / "results.json").write_text('{"rows": [], "rows": 7}')
    refused(["plot", str(d)], capsys, "duplicate key 'rows'")
    (d / "results.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(["plot", str(d)], capsys, "recursion limit")


def test_resume_refuses_a_deep_checkpoint_and_a_model_file_with_trailing_bytes(tmp_path, capsys):
    from sstq_fl.fl.engine import RunConfig, Trainer

    cfg = dict(task="lsq", dim=4, n=20, clients=2, batch=4, rounds=3, encoder="sqkr")
    tr = Trainer(RunConfig(**cfg))
    orig = tr.run_round

    def stop_at_2(st):  # the run stops in round 2: round 1's checkpoint stays
        if st.round == 1:
            raise KeyboardInterrupt
        return orig(st)

    tr.run_round = stop_at_2  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        tr.train(tmp_path / "r", progress=False)
    capsys.readouterr()
    args = ["run", *[f"--{k}={v}" for k, v in cfg.items()], "--out", str(tmp_path / "r"), "--resume"]
    theta = tmp_path / "r" / json.loads((tmp_path / "r" / "checkpoint.json").read_text())["theta_file"]
    theta.write_bytes(theta.read_bytes() + b"\0" * 64)
    refused(args, capsys, "has bytes after its array")
    (tmp_path / "r" / "checkpoint.json").write_text('{"rounds": ' + "[" * 100_000 + "]" * 100_000 + "}")
    refused(args, capsys, "recursion limit")
