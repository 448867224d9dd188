"""argparse value types of the ``sstq-fl`` command line: each parses one option's string or raises
``argparse.ArgumentTypeError`` with a one-line message saying what it expected."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def positive_int(s: str) -> int:
    """argparse type for counts (trials, clients, rounds, reps, dimensions): an integer ≥ 1."""
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def distinct_items(s: str, item: Callable[[str], T], what: str) -> list[T]:
    """A comma-separated list of distinct values, each parsed by ``item`` (no empty item); ``what`` names them."""
    items = [v.strip() for v in s.split(",")]
    if not s.strip() or "" in items:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what} with no empty item, got {s!r}")
    out = [item(v) for v in items]
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"expected distinct values, got {s!r}")
    return out


def positive_ints(s: str) -> list[int]:
    """argparse type for a comma-separated list of distinct counts, each an integer ≥ 1 (no empty item)."""
    return distinct_items(s, positive_int, "positive integers")


def positive_floats(s: str) -> list[float]:
    """argparse type for a comma-separated list of distinct positive finite numbers (no empty item)."""
    return distinct_items(s, positive_float, "positive numbers")


def seed_int(s: str) -> int:
    """argparse type for a public seed: an integer in ``[0, 2**63)``."""
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {s!r}") from None
    if not 0 <= v < 2**63:
        raise argparse.ArgumentTypeError(f"expected a seed in [0, 2**63), got {s!r}")
    return v


def float_in(s: str, ok: Any, expected: str) -> float:
    """``s`` as a float for which ``ok(v)`` holds, else an argparse error saying it ``expected`` that."""
    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not ok(v):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {s!r}")
    return v


def resource_amount(s: str) -> float:
    """argparse type for a Ray resource per actor (CPUs, GPUs; fractions share one): a finite number ≥ 0."""
    return float_in(s, lambda v: 0.0 <= v < float("inf"), "a finite number ≥ 0")


def item_list(s: str) -> list[str]:
    """argparse type for a space- or ';'-separated list: at least one item (leave the option out for the default)."""
    out = [v.strip() for v in s.split(";" if ";" in s else " ") if v.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"expected one or more space- or ';'-separated items, got {s!r}")
    return out


DEVICE_HELP = "torch device (cpu, cuda, cuda:N; auto: cuda where available, else cpu)"


def device_arg(s: str) -> str:
    """argparse type for a torch device that exists here (cpu, cuda, cuda:N), or ``auto``: cuda where available,
    else cpu (torch is imported only here, when the command that takes the option is parsed)."""
    from .checks import torch_device

    if s.strip() == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return torch_device(s)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def plan_epsilon(s: str) -> float:
    """argparse type for ``privacy plan``'s per-message ε: a number > 0 and ≤ 1e300 (the PLD accountant's range)."""
    return float_in(s, lambda v: 0.0 < v <= 1e300, "a number > 0 and ≤ 1e300")


def redundancy(s: str) -> float:
    """argparse type for a frame redundancy ρ = N/d: a finite number > 1."""
    return float_in(s, lambda v: 1.0 < v < float("inf"), "a finite number > 1")


def powers_of_two(s: str) -> list[int]:
    """argparse type for comma-separated transform sizes, each a power of two ≥ 2."""
    out = positive_ints(s)
    if any(n < 2 or n & (n - 1) for n in out):
        raise argparse.ArgumentTypeError(f"expected comma-separated powers of two ≥ 2, got {s!r}")
    return out


def positive_float(s: str) -> float:
    """argparse type for ε and radii: a finite number > 0."""
    return float_in(s, lambda v: 0.0 < v < float("inf"), "a finite number > 0")


def unit_rate(s: str) -> float:
    """argparse type for a participation rate q: a number in (0, 1]."""
    return float_in(s, lambda v: 0.0 < v <= 1.0, "a number in (0, 1]")


def probability(s: str) -> float:
    """argparse type for a significance level: a number strictly between 0 and 1."""
    return float_in(s, lambda v: 0.0 < v < 1.0, "a number in (0, 1)")


def at_least_100(s: str) -> int:
    """argparse type for a count of at least 100 (repetitions of a statistical estimate)."""
    v = positive_int(s)
    if v < 100:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 100, got {s!r}")
    return v


def out_file(s: str) -> str:
    """argparse type for a result file: a non-empty path with no control characters that is not a folder."""
    if not s.strip() or any(ord(c) < 32 for c in s) or os.path.isdir(s):
        raise argparse.ArgumentTypeError(f"expected a file path (not empty, not a folder, no control characters), "
                                         f"got {s!r}")
    return s


def out_folder(s: str) -> str:
    """argparse type for an output folder: a non-empty path (``''`` would write into the working directory)."""
    if not s.strip() or any(ord(c) < 32 for c in s):
        raise argparse.ArgumentTypeError(f"expected a folder path (not empty, no control characters), got {s!r}")
    return s
