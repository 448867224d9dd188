"""``sstq-fl encoders check``: one line per check, exit 0 / 1, one-line errors with exit 2; the listing marks origins."""

import re

import pytest

from sstq_fl.cli import main
from sstq_fl.encoders import base

from . import broken


@pytest.fixture
def registered():
    """Register encoders for one test, then put the registry back."""
    base.registry()
    state = base.ENCODERS.snapshot()

    def add(name, cls):
        base.ENCODERS.register(name, type(cls.__name__, (cls,), {"__module__": __name__}))
    yield add
    base.ENCODERS.restore(state)


def test_a_conforming_encoder_prints_one_line_per_check_and_exits_0(capsys):
    assert main(["encoders", "check", "vqsgd", "--dim", "5", "--epsilon", "2", "--trials", "4000",
                 "--audit-trials", "4000"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "vqsgd (d=5, ε=2, R=1):"
    assert [ln.split()[0] for ln in lines[1:]] == ["PASS"] * 7
    assert [ln.split()[1].rstrip(":") for ln in lines[1:]] == ["bits", "wire-roundtrip", "wire-rejection",
                                                               "batch-invariance", "epsilon-ldp", "unbiased", "mse"]


def test_a_failing_encoder_exits_1_and_names_the_failed_check(registered, capsys):
    registered("four-eps", broken.FourEpsilon)
    assert main(["encoders", "check", "four-eps", "--checks", "bits epsilon-ldp"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[1].startswith("PASS bits:") and out[2].startswith("FAIL epsilon-ldp:") and len(out) == 3


def test_skipped_checks_do_not_fail(capsys):
    assert main(["encoders", "check", "clean", "--checks", "epsilon-ldp"]) == 0
    assert "SKIP epsilon-ldp: not private" in capsys.readouterr().out


@pytest.mark.parametrize("argv,words", [
    (["encoders", "check", "no-such"], "unknown encoder 'no-such'"),
    (["encoders", "check", "vqsgd:b=3"], "no parameter"),
    (["encoders", "check", "vqsgd", "--checks", "bogus"], "unknown check"),
])
def test_bad_specs_are_one_line_errors_with_exit_2(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err


@pytest.mark.parametrize("flag,value,words", [("--dim", "0", "positive integer"), ("--epsilon", "-1", "number > 0"),
                                              ("--epsilon", "abc", "number > 0"), ("--alpha", "1.5", "in (0, 1)"),
                                              ("--trials", "10", "≥ 100"), ("--clip", "inf", "number > 0")])
def test_bad_numbers_exit_2_with_the_error_on_one_line(flag, value, words, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["encoders", "check", "vqsgd", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert words in err.splitlines()[-1] and "Traceback" not in err


def test_listing_still_works_and_marks_runtime_registrations(registered, capsys):
    registered("honest-rr", broken.HonestRR)
    assert main(["encoders"]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("honest-rr"))
    assert "[registered by tests.testing.test_cli_check]" in lines[i]
    assert lines[i + 1] == '    bits_formula = "ceil(log2(d)) + 1"  (⌈log2 d⌉ + 1)'  # as a plug-in writes it, then shown
    i = next(i for i, ln in enumerate(lines) if ln.startswith("sstq-flat"))
    assert lines[i + 1] == '    bits_formula = "ceil(log2(N)) + b"  (⌈log2 N⌉ + b)' and "[" not in lines[i].split("—")[-1]


def test_a_long_check_shows_progress_on_stderr(capsys):
    """The audit and the kit's checks report progress (log lines when stderr is not a terminal); stdout keeps
    the report alone."""
    assert main(["encoders", "check", "privunit-mrc", "--trials", "400", "--audit-trials", "400",
                 "--checks", "epsilon-ldp unbiased"]) == 0
    got = capsys.readouterr()
    assert re.search(r"epsilon-ldp audit messages (\d+)/(\d+) \((\d+) %", got.err)  # a line on the way
    assert re.search(r"epsilon-ldp audit messages (\d+)/\1 \(100 %", got.err)  # and the end
    assert "mean and MSE messages" in got.err
    assert "privunit-mrc conformance checks 1/2" in got.err and "conformance checks 2/2 (100 %" in got.err
    assert "conformance" not in got.out and len(got.out.strip().splitlines()) == 3
