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


def check_grid(path: str | None, axes: dict[str, list[Any]], overrides: dict[str, Any], limit: int) -> None:
    """Refuse (one line naming the file) a grid of more than ``limit`` cells."""
    n = grid_size(axes, overrides)
    if n > limit:
        shape = " × ".join(str(len(v)) for k, v in {**axes, **overrides}.items() if isinstance(v, list))
        raise ValueError(f"{path or 'experiment'}: the grid has {n:,} cells ({shape}), more than {limit:,}: "
                         f"shrink it or allow it with --max-cells {n}")
