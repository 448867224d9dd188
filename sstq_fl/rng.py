"""Counter-based, per-client randomness.

Every random draw a client makes is a pure function of ``(client_seed, stream, counter)``
through the SplitMix64 finaliser (Steele, Lea & Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014).  Batching many clients therefore never changes any client's
draws: a client's message depends only on its own input and its own seed, whichever other
clients share the batch and in whatever order a scheduler runs them.

All arithmetic is on ``numpy.uint64`` arrays, which wrap modulo 2**64.
"""

from __future__ import annotations

import zlib

import numpy as np
from numpy.typing import ArrayLike, NDArray

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_TWO_53 = float(2**53)

U64 = NDArray[np.uint64]


def splitmix64(z: U64) -> U64:
    """SplitMix64 finaliser, applied element-wise (a bijection of 64-bit words)."""
    with np.errstate(over="ignore"):
        z = np.asarray(z, dtype=np.uint64)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def stream_id(name: str) -> int:
    """A stable 32-bit identifier for a named random stream."""
    return zlib.crc32(name.encode("utf-8"))


def derive_seed(*parts: int) -> int:
    """Hash a tuple of non-negative integers (e.g. run seed, round, client) to one seed."""
    return int(derive_seeds(*parts)[0])


def derive_seeds(*parts: ArrayLike) -> U64:
    """Vectorised :func:`derive_seed`: parts may be integer arrays (broadcast together)."""
    arrs = [np.asarray(p) for p in parts]
    for a in arrs:
        if a.dtype.kind not in "iu" or (a.dtype.kind == "i" and (a < 0).any()):
            raise ValueError(f"seed parts must be non-negative integers, got {a!r}")
    shape = np.broadcast_shapes(*(a.shape for a in arrs)) if arrs else ()
    z = np.full(shape if shape else (1,), 0x6A09E667F3BCC909, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for a in arrs:
            z = splitmix64((z ^ a.astype(np.uint64)) + _GOLDEN)
    return z.reshape(-1)


def as_seeds(seeds: ArrayLike, n: int | None = None) -> U64:
    """Validate and convert client seeds to a ``uint64`` vector (one seed per client)."""
    arr = np.asarray(seeds)
    if arr.ndim != 1:
        raise ValueError(f"seeds must be a 1-D array of per-client seeds, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"seeds has {arr.shape[0]} entries but the batch has {n} clients")
    if arr.dtype.kind == "i" and (arr < 0).any():
        raise ValueError("seeds must be non-negative")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"seeds must be integers, got dtype {arr.dtype}")
    return arr.astype(np.uint64)


def raw_bits(seeds: U64, stream: str, count: int) -> U64:
    """``count`` independent 64-bit words per client: shape ``[n, count]``."""
    key = splitmix64(seeds ^ np.uint64(stream_id(stream) * 0x100000001B3 & 0xFFFFFFFFFFFFFFFF))
    ctr = (np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN)[None, :]
    with np.errstate(over="ignore"):
        return splitmix64(key[:, None] + ctr)


def uniform(seeds: U64, stream: str, count: int) -> NDArray[np.float64]:
    """Uniform draws in ``[0, 1)`` with 53 random bits each, shape ``[n, count]``."""
    return (raw_bits(seeds, stream, count) >> np.uint64(11)).astype(np.float64) / _TWO_53


def randint(seeds: U64, stream: str, count: int, high: int) -> NDArray[np.int64]:
    """Integers uniform on ``{0, …, high-1}``, shape ``[n, count]``.

    Uses the multiply-shift map on 53-bit uniforms; the bias is at most ``high / 2**53``.
    """
    if high < 1:
        raise ValueError(f"high must be >= 1, got {high}")
    u = uniform(seeds, stream, count)
    return np.minimum(np.floor(u * high).astype(np.int64), high - 1)


def normal(seeds: U64, stream: str, count: int) -> NDArray[np.float64]:
    """Standard normal draws (Box–Muller), shape ``[n, count]``."""
    half = (count + 1) // 2
    u = uniform(seeds, stream, 2 * half)
    u1 = 1.0 - u[:, :half]  # in (0, 1]
    u2 = u[:, half:]
    rad = np.sqrt(-2.0 * np.log(u1))
    z = np.concatenate([rad * np.cos(2 * np.pi * u2), rad * np.sin(2 * np.pi * u2)], axis=1)
    return z[:, :count]


def sample_without_replacement(seeds: U64, stream: str, k: int, n_items: int | NDArray[np.int64]) -> NDArray[np.int64]:
    """``k`` distinct indices in ``{0..n_items-1}`` per client (Floyd's algorithm), ``[n, k]``.

    ``n_items`` may differ per client (an array); each row depends only on its own seed.
    """
    items = np.broadcast_to(np.asarray(n_items, dtype=np.int64), seeds.shape)
    if k < 1 or (items < k).any():
        raise ValueError(f"cannot draw k={k} distinct items from {int(items.min(initial=k))}")
    u = uniform(seeds, stream, k)
    out = np.empty((seeds.shape[0], k), dtype=np.int64)
    for step in range(k):
        j = items - k + step
        t = np.minimum(np.floor(u[:, step] * (j + 1)).astype(np.int64), j)
        taken = (out[:, :step] == t[:, None]).any(axis=1) if step else np.zeros_like(t, bool)
        out[:, step] = np.where(taken, j, t)
    return out
