"""Float64 guards shared by the events, the accountants and the transcript reader.

``e^x`` overflows float64 for ``x`` above about 709.78; every formula of the privacy layer that
needs ``e^ε`` switches to an equivalent ``e^{−ε}`` form above :data:`EXP_SAFE`, and is the
original formula, bit for bit, below it.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import short_repr

EXP_SAFE = 700.0  # math.exp(x) is finite for x <= 709.78; above EXP_SAFE formulas switch to e^{-x} forms


def finite_real(v: Any, what: str) -> float:
    """``v`` as a finite float if it is a JSON number (an ``int`` or ``float``, never a ``bool``)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{what} must be a number, got {short_repr(v)}")
    try:
        out = float(v)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ValueError(f"{what} must be finite, got {short_repr(v)}")
    return out
