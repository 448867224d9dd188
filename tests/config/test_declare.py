"""Options declared once: the CLI, the run-config reader, the defaults and the reference come from the field."""

import argparse
from dataclasses import dataclass

import pytest

from sstq_fl.config.declare import (
    Options,
    add_arguments,
    check,
    from_args,
    from_run_config,
    option,
    options_markdown,
    run_config_defaults,
    same_option,
)


def _parse(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


@dataclass(frozen=True)
class Toy(Options):
    rounds: int = option(10, help="rounds", low=1)
    rate: float = option(0.5, help="rate", low=0, high=1)
    mode: str = option("a", help="mode", choices=("a", "b"))
    steps: int | None = option(None, help="steps", low=1, unset=0)
    fast: bool = option(False, help="go fast")
    moments: tuple[int, ...] = option((1,), help="moments", parse=_parse, choices=((1,), (1, 2)), metavar="{1|1,2}")
    secret: str = option("x", help="not on the CLI", flag="", key="hidden-key")


def _parser():
    p = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(p, Toy)
    return p


def test_cli_options_come_from_the_fields():
    ns = _parser().parse_args(["--rounds", "3", "--mode", "b", "--fast", "--moments", "1,2", "--steps", "4"])
    cfg = from_args(Toy, ns)
    assert cfg == Toy(rounds=3, mode="b", fast=True, moments=(1, 2), steps=4)
    assert "--secret" not in _parser().format_help() and "rounds" in _parser().format_help()


def test_cli_counts_are_argument_errors_and_ranges_config_errors():
    with pytest.raises(argparse.ArgumentError, match="expected a positive integer, got '0'"):
        _parser().parse_args(["--rounds", "0"])
    with pytest.raises(ValueError, match="rate must be a number ≥ 0 and ≤ 1, got 2.0"):
        from_args(Toy, _parser().parse_args(["--rate", "2"]))
    with pytest.raises(ValueError, match="mode must be one of a, b, got 'c'"):
        Toy(mode="c")
    with pytest.raises(ValueError, match="rate must be"):
        Toy(rate=float("nan"))
    check(Toy())


def test_run_config_reads_keys_unset_markers_and_refuses_unknown_ones():
    cfg = from_run_config(Toy, {"t-rounds": 4, "t-steps": 0, "t-moments": "1,2", "t-hidden-key": "y", "other": 1},
                          prefix="t-")
    assert cfg == Toy(rounds=4, steps=None, moments=(1, 2), secret="y")
    with pytest.raises(ValueError, match="unknown key 't-nope'"):
        from_run_config(Toy, {"t-nope": 1}, prefix="t-")
    assert from_run_config(Toy, {"rounds": 2, "rate": 1}) == Toy(rounds=2, rate=1.0)


def test_run_config_defaults_and_reference():
    d = run_config_defaults(Toy, prefix="t-")
    assert d == {"t-rounds": 10, "t-rate": 0.5, "t-mode": "a", "t-steps": 0, "t-fast": False, "t-moments": "1",
                 "t-hidden-key": "x"}
    md = options_markdown(Toy, "Toy", prefix="t-")
    assert "| `--rounds` | `t-rounds` | int | `10` | ≥ 1 | rounds |" in md and "| – | `t-hidden-key` |" in md


def test_int_ranges_can_be_left_to_the_config():
    p = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(p, Toy, int_ranges=False)
    ns = p.parse_args(["--rounds", "0"])
    with pytest.raises(ValueError, match="rounds must be a positive integer, got 0"):
        from_args(Toy, ns)


@dataclass(frozen=True)
class Worded(Options):
    epsilon: float = option(1.0, help="epsilon", required=True, low=0, strict_low=True)
    delta: float = option(1e-5, help="delta", low=0, high=1, strict_high=True)
    ref: str = option("", help="reference", choices=("", "argmin"), words={"none": "", "argmin": "argmin"})
    rounds: int = same_option(Toy, "rounds", help="the same rounds")


def test_required_flags_and_words_are_declared():
    """``required``: the CLI needs the flag (the API and the run config keep the default); ``words``: the CLI and the
    run config write a value as its word, the page shows the word; ``strict_high``: an open upper bound."""
    p = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(p, Worded)
    assert "--epsilon EPSILON" in p.format_usage() and "[--epsilon" not in p.format_usage()
    assert from_args(Worded, p.parse_args(["--epsilon", "2"])) == Worded(epsilon=2.0)
    assert from_args(Worded, p.parse_args(["--epsilon", "2", "--ref", "none"])).ref == ""
    with pytest.raises(argparse.ArgumentError, match="invalid choice: ''"):
        p.parse_args(["--epsilon", "2", "--ref", ""])
    assert from_run_config(Worded, {"ref": "none"}).ref == "" and from_run_config(Worded, {"ref": "argmin"}).ref == "argmin"
    assert run_config_defaults(Worded) == {"epsilon": 1.0, "delta": 1e-5, "ref": "none", "rounds": 10}
    md = options_markdown(Worded, "W")
    assert "| `--epsilon` | `epsilon` | float | required (run config: `1.0`) | > 0 | epsilon |" in md
    assert "| `--ref` | `ref` | str | `none` | `none` \\| `argmin` | reference |" in md
    assert "| `--delta` | `delta` | float | `1e-05` | ≥ 0, < 1 | delta |" in md
    with pytest.raises(ValueError, match="delta must be a number ≥ 0 and < 1, got 1.0"):
        Worded(delta=1.0)
    with pytest.raises(ValueError, match="ref must be one of none, argmin, got 'x'"):
        Worded(ref="x")


def test_a_field_can_hold_another_configs_option():
    """``same_option``: one declaration (default, range) for two configs, the help replaced where asked."""
    assert Worded().rounds == 10 and "the same rounds" in options_markdown(Worded, "W")
    with pytest.raises(ValueError, match="rounds must be a positive integer, got 0"):
        Worded(rounds=0)
