"""How large a sweep may be without asking: :data:`MAX_CELLS` cells (``sstq-fl sweep --max-cells N`` allows more)."""

from __future__ import annotations

import math
from typing import Any

MAX_CELLS = 10_000
"""The largest grid a sweep runs unless ``--max-cells`` allows more."""


def grid_size(axes: dict[str, list[Any]], overrides: dict[str, Any]) -> int:
    """The number of cells of ``axes`` with ``overrides`` applied (a list override: an axis), without building them."""
    sizes = {k: len(v) for k, v in axes.items() if k not in overrides}
    sizes.update({k: len(v) for k, v in overrides.items() if isinstance(v, list)})
    return math.prod(sizes.values())


def check_grid(path: str | None, shapes: list[dict[str, list[Any]]], limit: int, excluded: bool = False) -> None:
    """Refuse (one line naming the file) a grid of more than ``limit`` cells: ``shapes`` are the axes of each of its
    ``[[cell]]`` tables (one shape without tables), counted before the ``[[exclude]]`` tables (``excluded``: the
    file has some, which the message says)."""
    n = sum(math.prod(len(v) for v in axes.values()) for axes in shapes)
    if n > limit:
        shape = " + ".join(" × ".join(str(len(v)) for v in axes.values() if len(v) > 1) or "1" for axes in shapes)
        before = " before its exclusions" if excluded else ""
        raise ValueError(f"{path or 'experiment'}: the grid has {n:,} cells{before} ({shape}), more than {limit:,}: "
                         f"shrink it or allow it with --max-cells {n}")
