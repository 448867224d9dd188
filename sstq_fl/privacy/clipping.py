"""Norm clipping, the step that bounds a record's contribution (its sensitivity) before noise.

``clip_R(v) = v · min(1, R/‖v‖)`` (Abadi et al., CCS 2016, "Deep Learning with Differential
Privacy", §3.1): ``‖clip_R(v)‖ ≤ R`` for every ``v``, and ``clip_R(v) = v`` when ``‖v‖ ≤ R``, so a sum
of clipped records has ℓ2 sensitivity ``R`` under add/remove-one-record and ``2R`` under replace-one.
"""

from __future__ import annotations

import numpy as np


def clip_rows(rows: np.ndarray, bound: float) -> np.ndarray:
    """``clip_R`` applied to each row of ``rows`` (axis 0 indexes records; the rest of a row, of any
    shape, is one vector), with ``R = bound``.  A zero row stays zero."""
    norms = np.linalg.norm(rows.reshape(len(rows), -1), axis=1)
    scale = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    return rows * scale.reshape(-1, *([1] * (rows.ndim - 1)))
