"""Intervals over seeds (the option: :mod:`sstq_fl.config.intervals`): the one tables hold and figures draw, its
half-width, its clipping to a metric's range, and the warning when it rests on fewer than :data:`FEW_SEEDS` seeds.

``t95``: the 95 % Student-t interval ``mean ± t₀.₉₇₅,ₙ₋₁ · s/√n`` (Student, 1908; with 2 seeds
``t₀.₉₇₅,₁ = 12.71``, so the interval is wide); ``se``: ``mean ± s/√n``, one standard error (about a 68 %
interval for many seeds, less for few); ``none``: no interval.  None of them exists for one seed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .config.intervals import INTERVALS

FEW_SEEDS = 3
"""An interval over fewer seeds is flagged: logged and noted in the figure."""
NAMES = {"t95": "95 % Student-t interval", "se": "± 1 standard error", "none": "no interval"}
log = logging.getLogger("sstq_fl.intervals")



def factor(kind: str, n: int) -> float | None:
    """The multiple of ``s/√n`` an interval of ``kind`` over ``n`` seeds spans each side (None: no interval)."""
    if kind not in INTERVALS:
        raise ValueError(f"interval must be one of {', '.join(INTERVALS)}, got {kind!r}")
    if kind == "none" or n < 2:
        return None
    if kind == "se":
        return 1.0
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1))


def bounds(mean: float, sd: float | None, n: int, kind: str) -> tuple[float | None, float | None]:
    """``(low, high)`` of the interval of ``kind`` (None, None without one: ``none``, one seed, no ``sd``)."""
    f = factor(kind, n)
    if f is None or sd is None or not math.isfinite(sd):
        return None, None
    half = f * sd / math.sqrt(n)
    return mean - half, mean + half


def clip(low: float, high: float, limits: tuple[float, float]) -> tuple[float, float, bool]:
    """``(low, high)`` within ``limits`` (a metric's range) and whether either was cut."""
    lo, hi = max(low, limits[0]), min(high, limits[1])
    return lo, hi, (lo, hi) != (low, high)


def few_seeds_note(kind: str, seeds: set[int]) -> str:
    """The figure's warning when an interval of ``kind`` rests on fewer than :data:`FEW_SEEDS` seeds; "" otherwise."""
    few = sorted(n for n in seeds if 2 <= n < FEW_SEEDS)
    if kind == "none" or not few:
        return ""
    f = factor(kind, few[0])
    t = f" (t₀.₉₇₅,{few[0] - 1} = {f:.3g})" if kind == "t95" else ""
    return f"⚠ {NAMES[kind]} over {few[0]} seeds{t}: too few seeds for a reliable interval"


def warn_few_seeds(kind: str, seeds: set[int], what: str) -> str:
    """Log :func:`few_seeds_note` (as a warning naming ``what``) where there is one; return it."""
    note = few_seeds_note(kind, seeds)
    if note:
        log.warning("%s: %s", what, note.lstrip("⚠ "))
    return note


@dataclass
class Bands:
    """A figure's intervals of ``kind``: each row's ``(low, high)`` from its mean, sd and seeds, clipped to
    ``limits`` (the value's range, :data:`sstq_fl.fl.engine.METRIC_RANGES`); remembers the seed counts it drew
    and whether it clipped any, for the figure's note (:meth:`note`)."""

    kind: str
    limits: tuple[float, float] = (-math.inf, math.inf)
    clipped: bool = False
    seeds: set[int] = field(default_factory=set)

    def __call__(self, row: Mapping[str, Any], key: str = "metric") -> tuple[float | None, float | None]:
        """``row``'s interval of ``<key>_mean`` (None, None where it has none)."""
        mean, sd, n = row.get(f"{key}_mean"), row.get(f"{key}_sd"), int(row.get("seeds") or 0)
        if mean is None:
            return None, None
        low, high = bounds(float(mean), None if sd is None else float(sd), n, self.kind)
        if low is None or high is None:
            return None, None
        self.seeds.add(n)
        low, high, cut = clip(low, high, self.limits)
        self.clipped |= cut
        return low, high

    def errors(self, row: Mapping[str, Any], key: str = "metric") -> list[list[float]] | None:
        """``row``'s interval as matplotlib's ``yerr`` (``[[below], [above]]``; None without one)."""
        low, high = self(row, key)
        if low is None or high is None:
            return None
        mean = float(row[f"{key}_mean"])
        return [[max(mean - low, 0.0)], [max(high - mean, 0.0)]]

    def note(self) -> str:
        """The figure's note: the few-seeds warning and the clipping, "" when neither applies."""
        lo, hi = self.limits
        cut = f"intervals clipped to the value's range [{lo:g}, {hi:g}]" if self.clipped else ""
        return "; ".join(p for p in (few_seeds_note(self.kind, self.seeds), cut) if p)
