"""The interval over seeds that tables hold and figures draw, declared once (:mod:`sstq_fl.intervals` computes it).

``t95``: the 95 % Student-t interval ``mean ± t₀.₉₇₅,ₙ₋₁ · s/√n`` (Student, 1908); ``se``: ``mean ± s/√n``, one
standard error; ``none``: no interval.
"""

from __future__ import annotations

from dataclasses import dataclass

from .declare import Options, option

INTERVALS = ("t95", "se", "none")
"""The intervals over seeds."""


@dataclass(frozen=True)
class IntervalOptions(Options):
    """The interval over seeds of ``sstq-fl sweep``, ``compare`` and ``plot`` (also ``[experiment] interval`` in
    an experiment file)."""

    interval: str = option("t95", choices=INTERVALS, key="",
                           help="interval over seeds that the tables hold and the figures draw: t95 (95 %% Student-t), "
                                "se (± 1 standard error) or none; on sweep, compare and plot, unless given: the "
                                "experiment file's [experiment] interval (plot: the interval the tables hold), else t95")
