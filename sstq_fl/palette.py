"""One look per series index, shared by every figure: Okabe–Ito's eight colour-blind-safe colours
(Okabe & Ito, "Color Universal Design", 2008, https://jfly.uni-koeln.de/color/), each with a marker, and a
new line style and marker for every further round of eight, so up to 32 series (and surely the 12 encoders
of a comparison) differ in colour, line style or both, and in colour or marker where they are points.  The
yellow comes last: on white it is the faintest.  No matplotlib import: a look is plain keyword values for
``plot`` / ``errorbar``.
"""

from __future__ import annotations

from typing import Any

OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
"""Blue, vermillion, bluish green, reddish purple, orange, sky blue, black, yellow."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINES = ("-", "--", "-.", ":")


def look(i: int) -> dict[str, Any]:
    """The ``i``-th series' ``color``, ``marker`` and line style ``ls``: the colour cycles every 8, the marker every
    8 shifted by one each round of 8 (so a scatter's points, which have no line, stay apart too), the line style
    changes every 8 (``(color, ls)`` repeats only after 32 series, ``(color, marker)`` after 64)."""
    n = len(OKABE_ITO)
    return {"color": OKABE_ITO[i % n], "marker": MARKERS[(i + i // n) % n], "ls": LINES[(i // n) % len(LINES)]}
