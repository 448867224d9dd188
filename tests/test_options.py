"""Options declared once: the CLI, the run-config reader, the defaults and the reference come from the field."""

import argparse
from dataclasses import dataclass

import pytest

from sstq_fl.options import (
    Options,
    add_arguments,
    check,
    from_args,
    from_run_config,
    option,
    options_markdown,
    run_config_defaults,
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
    assert from_run_config(Toy, {"rounds": 2, "rate": 1}, shared=("rounds", "rate")) == Toy(rounds=2, rate=1.0)


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
