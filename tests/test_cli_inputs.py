"""Honest results under every input: interrupts, occupied output folders, bad counts, --help texts."""

import argparse
import json
import re
import signal
import subprocess
import sys
import time

import pytest

from sstq_fl.cli import build_parser, main

from .fl.test_engine import same_rounds

LSQ = ["--task", "lsq", "--dim", "8", "--n", "100", "--clients", "5", "--batch", "10", "--clip", "1", "--lr", "0.5"]


def run_args(out, *extra, rounds=3, encoder="sqkr"):
    """``sstq-fl run`` arguments for a tiny least-squares run into ``out``."""
    return ["run", *LSQ, "--rounds", str(rounds), "--encoder", encoder, "--out", str(out), *extra]


# ------------------------------------------------------------------ 1. interrupts and --resume
def _sigint_after(cmd, ck, min_round):
    """Start ``cmd``; once ``ck`` records ``min_round`` completed rounds, send SIGINT; return (rc, stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        if ck.exists() and json.loads(ck.read_text())["round"] >= min_round:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_ctrl_c_stops_with_one_line_and_resume_completes_identically(tmp_path, capsys):
    args = ["--task", "lsq", "--dim", "100", "--n", "2000", "--clients", "100", "--batch", "20", "--clip", "1",
            "--lr", "0.5", "--rounds", "120", "--encoder", "sstq-flat:b=4", "--seed", "3"]
    out = tmp_path / "k"
    rc, err = _sigint_after([sys.executable, "-m", "sstq_fl.cli", "run", *args, "--out", str(out)],
                            out / "checkpoint.json", 3)
    assert rc == 130, err
    assert "Traceback" not in err and err.count("interrupted") == 1, err
    last = err.strip().splitlines()[-1]
    t = int(re.fullmatch(r"interrupted after round (\d+): rerun with --resume", last).group(1))  # type: ignore[union-attr]
    assert 3 <= t < 120 and json.loads((out / "checkpoint.json").read_text())["round"] == t
    assert main(["run", *args, "--out", str(out), "--resume"]) == 0
    assert f"resuming from round {t} of 120 in {out}" in capsys.readouterr().out
    assert main(["run", *args, "--out", str(tmp_path / "ref")]) == 0
    got, ref = (json.loads((p / "metrics.json").read_text()) for p in (out, tmp_path / "ref"))
    assert same_rounds(got["rounds"], ref["rounds"])  # to the last bits of LAPACK's θ* (another process)
    assert got["final"]["epsilon_total"] == ref["final"]["epsilon_total"]


def test_ctrl_c_during_compare_names_the_round_and_resume_finishes(tmp_path, monkeypatch, capsys):
    from sstq_fl.fl.engine import Trainer

    orig = Trainer.run_round

    def stop(self, st):
        if self.cfg.encoder == "sqkr" and st.round == 1:
            raise KeyboardInterrupt
        return orig(self, st)

    monkeypatch.setattr(Trainer, "run_round", stop)
    cmp = ["compare", *LSQ, "--rounds", "3", "--encoders", "clean sqkr", "--out", str(tmp_path / "c")]
    assert main(cmp) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted after round 1: rerun with --resume"
    monkeypatch.undo()
    assert main([*cmp, "--resume"]) == 0
    out = capsys.readouterr().out
    assert "clean: " in out and "(already complete)" in out and "resuming sqkr from round 1 of 3" in out
    assert len(json.loads((tmp_path / "c" / "sqkr" / "metrics.json").read_text())["rounds"]) == 3
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--resume", "--force"])


def test_resume_says_where_it_restarts_and_refuses_a_missing_checkpoint(tmp_path, capsys):
    assert main(run_args(tmp_path / "r")) == 0
    capsys.readouterr()
    assert main(run_args(tmp_path / "r", "--resume")) == 0
    assert f"the run in {tmp_path / 'r'} is complete (3 rounds): nothing to resume" in capsys.readouterr().out
    assert main(run_args(tmp_path / "none", "--resume")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no checkpoint" in err and not (tmp_path / "none").exists()
    (tmp_path / "empty").mkdir()
    assert main(run_args(tmp_path / "empty", "--resume")) == 2 and "no checkpoint" in capsys.readouterr().err
    assert main(run_args(tmp_path / "r", "--resume", rounds=4)) == 2
    assert "different config" in capsys.readouterr().err


def test_compare_resume_needs_a_started_comparison(tmp_path, capsys):
    cmp = ["compare", *LSQ, "--rounds", "2", "--encoders", "clean sqkr", "--out"]
    assert main([*cmp, str(tmp_path / "none"), "--resume"]) == 2
    assert "no checkpoint" in capsys.readouterr().err and not (tmp_path / "none").exists()
    assert main([*cmp, str(tmp_path / "c")]) == 0
    capsys.readouterr()
    assert main([*cmp, str(tmp_path / "c"), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "sqkr: " in out and "(already complete)" in out and "resuming" not in out  # checkpoints removed when complete


# ------------------------------------------------------------------ 2. occupied output folders
def test_run_refuses_to_overwrite_another_run_unless_forced(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(run_args(out)) == 0
    first = json.loads((out / "metrics.json").read_text())["privacy_transcript"]["run_id"]
    capsys.readouterr()
    assert main(run_args(out, encoder="vqsgd")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds" in err and "--force" in err and "--resume" in err
    assert json.loads((out / "metrics.json").read_text())["privacy_transcript"]["run_id"] == first
    assert main(run_args(out, "--force", encoder="vqsgd")) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["privacy_transcript"]["run_id"] != first and m["config"]["encoder"] == "vqsgd"
    with pytest.raises(SystemExit):
        build_parser().parse_args(run_args(out, "--force", "--resume"))


def test_compare_refuses_an_occupied_folder_unless_forced(tmp_path, capsys):
    cmp = ["compare", *LSQ, "--rounds", "2", "--encoders", "clean sqkr", "--out", str(tmp_path / "c")]
    assert main(cmp) == 0
    capsys.readouterr()
    assert main(cmp) == 2 and "already holds" in capsys.readouterr().err
    assert main([*cmp, "--force"]) == 0


@pytest.mark.parametrize("bad, why", [
    (["--encoder", "sstq-flat:b=99"], "b"),
    (["--budget-epsilon", "1"], "budget"),
    (["--task", "cifar10"], "data-dir"),
])
def test_a_refused_run_leaves_no_folder(tmp_path, capsys, bad, why):
    out = tmp_path / "new" / "r"
    assert main(run_args(out) + bad) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err and not out.exists() and not out.parent.exists()


def test_a_refused_run_prints_only_its_error(tmp_path, monkeypatch, caplog, capsys):
    """No reproducible-mode warning for a run that never starts: the error is the only line."""
    import logging

    import sstq_fl.fl.engine as engine

    monkeypatch.setattr(engine, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger="sstq_fl.fl"):
        assert main(run_args(tmp_path / "r", encoder="sstq-flat:b=99")) == 2
        assert main(run_args(tmp_path / "r")) == 0
        assert main(run_args(tmp_path / "r")) == 2
    assert [r.getMessage()[:24] for r in caplog.records] == ["randomness=reproducible:"]  # the run that started
    assert capsys.readouterr().err.count("sstq-fl: error:") == 2


# ------------------------------------------------------------------ 3. compare checks every spec first
def test_compare_checks_every_encoder_before_training(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["compare", *LSQ, "--rounds", "2", "--encoders", "clean sqkr sstq-flat:b=99", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sstq-flat" in err and "99" in err and not out.exists()


# ------------------------------------------------------------------ 6. non-positive counts
@pytest.mark.parametrize("argv", [
    ["bench", "mse-vs-dim", "--trials", "0"],
    ["bench", "mse-vs-dim", "--dims", "100,0"],
    ["bench", "mse-vs-dim", "--bits", "0"],
    ["bench", "encode-speed", "--clients", "0"],
    ["bench", "encode-speed", "--reps", "0"],
    ["bench", "encode-speed", "--dim", "-3"],
    ["bench", "fwht", "--rows", "0"],
    ["bench", "fwht", "--sizes", "0"],
    ["bench", "kashin", "--dim", "0"],
    ["bench", "ledger", "--steps", "0"],
    ["run", "--rounds", "0", "--out", "x"],
    ["run", "--clients", "0", "--out", "x"],
    ["run", "--batch", "0", "--out", "x"],
    ["compare", "--rounds", "0", "--out", "x"],
    ["demo", "--rounds", "0"],
    ["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "0"],
    ["bench", "encode-speed", "--reps", "two"],
])
def test_non_positive_counts_are_argument_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert "positive integer" in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize("flag, value", [("--client-cpus", "-1"), ("--client-gpus", "nan"), ("--client-gpus", "one")])
def test_bad_ray_resources_are_argument_errors(flag, value, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["run", "--engine", "flower", flag, value, "--out", "x"])
    assert exc.value.code == 2
    assert f"expected a finite number ≥ 0, got {value!r}" in capsys.readouterr().err.splitlines()[-1]


def test_count_lists_still_parse():
    ns = build_parser().parse_args(["bench", "mse-vs-dim"])
    assert ns.dims == [100, 500, 1000, 5000, 10000] and ns.trials == 1000 and ns.encoders is None
    assert build_parser().parse_args(["bench", "fwht", "--sizes", "8,16"]).sizes == [8, 16]


# ------------------------------------------------------------------ 7. --help
def _parsers(p, path=()):
    """Every (sub)parser with its command path."""
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                yield from _parsers(sp, (*path, name))


def test_every_option_has_help_and_shows_its_default():
    for path, p in _parsers(build_parser()):
        fmt = p._get_formatter()
        for a in p._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert a.help and a.help.strip(), (path, a.dest)
            if a.option_strings and not a.required and a.default not in (None, False, "", []) and a.default is not True:
                assert "%(default)" in fmt._get_help_string(a), (path, a.dest)
    help_text = " ".join(dict(_parsers(build_parser()))[("run",)].format_help().split())
    assert "training rounds (default: 100)" in help_text and "(default: vectorized)" in help_text


def test_moments_usage_names_the_choices_once():
    text = dict(_parsers(build_parser()))[("gen", "dp-mepf")].format_help()
    assert "{1,1,2}" not in text and "--moments" in text


# ------------------------------------------------------------------ 8. privacy plan heading
def test_plan_heading_matches_the_sampling_rate(capsys):
    assert main(["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "10"]) == 0
    assert "10 rounds, full participation" in capsys.readouterr().out
    assert main(["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "10", "--sampling-rate", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "full participation" not in out and "sampling rate q = 0.1" in out.splitlines()[1]


def test_bench_interrupt_is_one_line(monkeypatch, capsys, tmp_path):
    import sstq_fl.bench.mse as mse

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(mse, "measure", boom)
    assert main(["bench", "mse-vs-dim", "--dims", "8", "--trials", "2", "--out", str(tmp_path / "e.json")]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_readme_states_the_demo_settings_that_differ_from_run_defaults():
    """The README's main command is the demo: it must say that its clip and learning rate are its own."""
    from pathlib import Path

    from sstq_fl.cli import cmd_demo  # noqa: F401  (the demo exists)

    head = (Path(__file__).resolve().parents[1] / "README.md").read_text()[:3000]
    args = build_parser().parse_args(["run", "--out", "x"])
    assert "clip 0.5" in head and "learning rate 0.5" in head
    assert f"clip {args.clip}" in head and f"learning rate {args.lr}" in head
