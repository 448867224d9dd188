"""Check ``batch-invariance``: a message depends only on its input and its seed or key.

The rows of one batch are encoded again permuted, in sub-batches of other sizes and surrounded by other
rows, with the same per-row seeds (and once more with 256-bit keys, the secure mode's format); every
message must be identical, as :mod:`sstq_fl.rng` promises for counter-based randomness.
"""

from __future__ import annotations

import numpy as np
import torch

from ..encoders.base import Encoder, Messages
from . import inputs
from .report import CheckResult, failed, passed

NAME = "batch-invariance"
ROWS = 10


def check_batching(enc: Encoder) -> CheckResult:
    """Identical messages across order, batch size and neighbours, for seeds and for keys."""
    x = inputs.mixed_batch(enc, ROWS)
    for label, s in (("seeds", inputs.seeds(NAME, ROWS)), ("keys", inputs.fixed_keys(ROWS))):
        why = _invariant(enc, x, s)
        if why:
            return failed(NAME, f"with {label}: {why}")
    return passed(NAME, f"{ROWS} rows: identical messages when encoded twice, permuted, in sub-batches of 1 and 3, "
                        f"and among 7 other rows (per-row seeds and 256-bit keys)")


def _encode(enc: Encoder, x: torch.Tensor, s: np.ndarray) -> Messages:
    return enc.encode(x, s, coins=inputs.coins(s))


def _invariant(enc: Encoder, x: torch.Tensor, s: np.ndarray) -> str | None:
    ref = _encode(enc, x, s)
    if (why := _differs(ref, _encode(enc, x, s), np.arange(ROWS))) is not None:
        return f"encoding the same batch twice changed {why}"
    perm = np.random.default_rng(5).permutation(ROWS)
    if (why := _differs(ref, _encode(enc, x[perm], s[perm]), perm)) is not None:
        return f"permuting the batch changed {why}"
    for size in (1, 3):
        parts = [_encode(enc, x[i : i + size], s[i : i + size]) for i in range(0, ROWS, size)]
        joined = Messages({k: torch.cat([p.fields[k] for p in parts]) for k in ref.fields})
        if (why := _differs(ref, joined, np.arange(ROWS))) is not None:
            return f"sub-batches of {size} changed {why}"
    extra = inputs.mixed_batch(enc, 7).flip(0)
    others = inputs.seeds(NAME + "-others", 7) if s.ndim == 1 else inputs.fixed_keys(7 + ROWS)[ROWS:]
    padded = _encode(enc, torch.cat([extra[:3], x, extra[3:]]), np.concatenate([others[:3], s, others[3:]]))
    if (why := _differs(ref, padded.select(list(range(3, 3 + ROWS))), np.arange(ROWS))) is not None:
        return f"surrounding the rows with 7 others changed {why}"
    return None


def _differs(ref: Messages, got: Messages, rows: np.ndarray) -> str | None:
    """``got`` row ``j`` must equal ``ref`` row ``rows[j]``; else which field and row differ."""
    if set(got.fields) != set(ref.fields):
        return f"the fields ({sorted(got.fields)} vs {sorted(ref.fields)})"
    for k, v in ref.fields.items():
        want = v[torch.as_tensor(rows, dtype=torch.int64)]
        g = got.fields[k]
        if g.shape != want.shape:
            return f"field {k!r}'s shape ({tuple(g.shape)} vs {tuple(want.shape)})"
        bad = ~(g == want).reshape(len(rows), -1).all(1)
        if bool(bad.any()):
            return f"field {k!r} of row {int(rows[int(torch.nonzero(bad)[0])])}"
    return None
