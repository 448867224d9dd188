"""Inputs and seeds for the checks: worst-case pairs on the ball's boundary, interior points, fixed seeds."""

from __future__ import annotations

import numpy as np
import torch

from .. import rng
from ..encoders.base import Encoder

COIN_OFFSET = 7_777_777
"""Public per-client coins are the message seeds plus this offset (public-coin encoders use them)."""


def seeds(tag: str, n: int, base: int = 0) -> np.ndarray:
    """``n`` fixed, distinct-looking 64-bit seeds for the check ``tag`` (a pure function of the arguments)."""
    return rng.derive_seeds(np.uint64(base), np.uint64(rng.stream_id(tag)), np.arange(n, dtype=np.uint64))


def coins(s: np.ndarray) -> np.ndarray:
    """The public coins that go with seeds ``s``."""
    return (s.astype(np.uint64) + np.uint64(COIN_OFFSET)) if s.ndim == 1 else s[:, 0] + np.uint64(COIN_OFFSET)


def basis(enc: Encoder, i: int, scale: float = 1.0) -> torch.Tensor:
    """``scale · R · e_i``."""
    e = torch.zeros(enc.dim, dtype=torch.float64)
    e[i % enc.dim] = scale * enc.radius
    return e


def direction(enc: Encoder, seed: int, norm: float) -> torch.Tensor:
    """A fixed Gaussian direction of ``R^d`` scaled to ``norm · R``."""
    g = torch.from_numpy(np.random.default_rng(seed).standard_normal(enc.dim))
    return g / torch.linalg.vector_norm(g) * norm * enc.radius


def worst_pairs(enc: Encoder) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Input pairs at the boundary where an LDP ratio is largest: ``±R e_0`` and ``±R g`` (``g`` random)."""
    g = direction(enc, 11, 1.0)
    return [("x=R e0 vs -R e0", basis(enc, 0), -basis(enc, 0)), ("x=R g vs -R g", g, -g)]


def boundary_set(enc: Encoder) -> torch.Tensor:
    """Zero, ``±R e_i`` for every ``i`` (at most 32), four random boundary points and their negatives, and
    ``±R`` times the first rows of a public frame when the encoder has one (``frame.rows``)."""
    xs = [torch.zeros(enc.dim, dtype=torch.float64)]
    for i in range(min(enc.dim, 32)):
        xs += [basis(enc, i), -basis(enc, i)]
    for k in range(4):
        g = direction(enc, 100 + k, 1.0)
        xs += [g, -g]
    frame = getattr(enc, "frame", None)
    if frame is not None and hasattr(frame, "rows"):
        rows = frame.rows(torch.arange(min(int(getattr(enc, "N", 6)), 6))).double().cpu()
        rows = rows / torch.linalg.vector_norm(rows, dim=1, keepdim=True).clamp_min(1e-300) * enc.radius
        xs += list(rows) + list(-rows)
    return torch.stack(xs)


def moment_inputs(enc: Encoder) -> list[tuple[str, torch.Tensor]]:
    """Inputs for the mean and MSE checks: a direction at ``0.8 R`` (not clipped), and, unless the encoder is
    only unbiased when nothing is clipped, one at ``2 R`` (projected onto the ball first)."""
    out = [("x=0.8R g", direction(enc, 21, 0.8))]
    if not enc.unbiased_unless_clipped:
        out.append(("x=2R g'", direction(enc, 22, 2.0)))
    return out


def mixed_batch(enc: Encoder, n: int = 10) -> torch.Tensor:
    """``n`` rows of mixed norms (zero, tiny, interior, boundary, outside the ball) for the batching check."""
    rows = [torch.zeros(enc.dim, dtype=torch.float64), basis(enc, 1), -basis(enc, 0, 0.5), direction(enc, 31, 1e-3)]
    rows += [direction(enc, 40 + k, [0.3, 0.9, 1.0, 3.0][k % 4]) for k in range(max(n - len(rows), 0))]
    return torch.stack(rows[:n])


def fixed_keys(n: int) -> np.ndarray:
    """``n`` fixed 256-bit client keys ``[n, 4]`` (secure-mode key format, but reproducible)."""
    return rng.derive_seeds(np.arange(n * rng.KEY_WORDS, dtype=np.uint64) + np.uint64(99)).reshape(n, rng.KEY_WORDS)
