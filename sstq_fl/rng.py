"""Counter-based, per-client randomness.

Every random draw a client makes is a pure function of ``(client_seed, stream, counter)``
through the SplitMix64 finaliser (Steele, Lea & Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014).  Batching many clients therefore never changes any client's
draws: a client's message depends only on its own input and its own seed, whichever other
clients share the batch and in whatever order a scheduler runs them.

All arithmetic is on ``numpy.uint64`` arrays, which wrap modulo 2**64.

Two randomness modes (``RANDOMNESS_MODES``):

* ``reproducible``: a client's coins are SplitMix64 of ``(run seed, round, client)``.  For
  simulation research only: runs repeat and engines agree, but **the LDP guarantee does not
  hold against whoever holds the seed** (the server sends it, results record it).
* ``secure``: each client draws a fresh 256-bit key from the operating system's CSPRNG
  (:func:`fresh_keys`, ``os.urandom``), never sends or logs it, and derives its coins from it
  with the ChaCha20 stream cipher (Bernstein 2008; RFC 8439) used as a keyed generator, one
  keystream per named stream (the nonce is a hash of the stream name).  A batch of keys is a
  ``[n, 4]`` ``uint64`` array; every function below accepts it wherever it accepts a vector of
  seeds, so a message still depends only on its input and its own key, however it is batched.
  Server-side noise, sampling and shuffles come from the OS CSPRNG directly
  (:func:`secure_uniform`, :func:`secure_normal`, :func:`secure_permutation`) and are never
  recorded.
"""

from __future__ import annotations

import hashlib
import os
import zlib

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .config.vocab import RANDOMNESS

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_TWO_53 = float(2**53)

U64 = NDArray[np.uint64]
RANDOMNESS_MODES = RANDOMNESS
KEY_WORDS = 4  # a secure client key: 256 bits as four uint64 words
REPRODUCIBLE_WARNING = ("randomness=reproducible: every coin is derived from the run seed, so no privacy guarantee "
                        "holds against whoever holds the seed (the server, any reader of the results); "
                        "for simulation research only")


def check_mode(mode: str) -> str:
    """Validate a randomness mode name (``reproducible`` or ``secure``)."""
    if mode not in RANDOMNESS_MODES:
        raise ValueError(f"randomness must be one of {list(RANDOMNESS_MODES)}, got {mode!r}")
    return mode


def fresh_keys(n: int) -> U64:
    """``n`` fresh 256-bit client keys ``[n, 4]`` from the OS CSPRNG (``os.urandom``)."""
    return np.frombuffer(os.urandom(8 * KEY_WORDS * n), dtype=np.uint64).reshape(n, KEY_WORDS).copy()


def is_keys(seeds: np.ndarray) -> bool:
    """True for a batch of secure keys (``[n, 4]``), False for reproducible seeds (``[n]``)."""
    return seeds.ndim == 2


def _nonce(stream: str) -> bytes:
    """ChaCha20's 16-byte initial block: a zero 32-bit block counter, then 96 bits naming the stream."""
    return b"\0\0\0\0" + hashlib.blake2b(stream.encode("utf-8"), digest_size=12).digest()


def _chacha_bits(keys: U64, stream: str, count: int) -> U64:
    """``count`` keystream words per key: ChaCha20(key, nonce(stream)) applied to zeros."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms  # secure mode only (0.1 s to load)

    out = np.empty((keys.shape[0], count), dtype=np.uint64)
    nonce, zeros = _nonce(stream), bytes(8 * count)
    for i, key in enumerate(np.ascontiguousarray(keys, dtype="<u8")):
        enc = Cipher(algorithms.ChaCha20(key.tobytes(), nonce), mode=None).encryptor()
        out[i] = np.frombuffer(enc.update(zeros), dtype="<u8")
    return out


def secure_bits(count: int) -> U64:
    """``count`` 64-bit words from the OS CSPRNG (server-side draws; never recorded)."""
    return np.frombuffer(os.urandom(8 * count), dtype=np.uint64).copy()


def _to_unit(words: U64) -> NDArray[np.float64]:
    return (words >> np.uint64(11)).astype(np.float64) / _TWO_53


def secure_uniform(shape: int | tuple[int, ...]) -> NDArray[np.float64]:
    """Uniforms in ``[0, 1)`` with 53 bits each from the OS CSPRNG."""
    n = int(np.prod(shape))
    return _to_unit(secure_bits(n)).reshape(shape)


def _box_muller(u: NDArray[np.float64], count: int) -> NDArray[np.float64]:
    """Standard normals from ``2⌈count/2⌉`` uniforms per row (the last axis), shape ``[..., count]``."""
    half = u.shape[-1] // 2
    rad = np.sqrt(-2.0 * np.log(1.0 - u[..., :half]))
    ang = 2 * np.pi * u[..., half:]
    return np.concatenate([rad * np.cos(ang), rad * np.sin(ang)], axis=-1)[..., :count]


def secure_normal(shape: int | tuple[int, ...], std: float) -> NDArray[np.float64]:
    """``N(0, std²)`` noise that resists the floating-point attack on noise sampling.

    Mironov (CCS 2012) showed that a textbook floating-point sampler leaves gaps in the set
    of reachable outputs, so ``f(x) + noise`` can reveal ``f(x)``.  The defence is Opacus's
    secure mode (Holohan & Braghin, "Secure Random Sampling in Differential Privacy",
    ESORICS 2021): the sum of four independent ``N(0, std²)`` draws, halved, which has the
    same law ``N(0, std²)`` but fills the floating-point grid; each draw is Box–Muller on
    53-bit uniforms from the OS CSPRNG, so the noise is also unpredictable.
    """
    n = int(np.prod(shape))
    total = np.zeros(n)
    for _ in range(4):
        total += _box_muller(secure_uniform((2 * ((n + 1) // 2),)), n)
    return (total * (std / 2.0)).reshape(shape)


def secure_permutation(n: int) -> NDArray[np.int64]:
    """A uniformly random permutation of ``0..n-1`` from the OS CSPRNG (sort by 64-bit keys)."""
    return np.argsort(secure_bits(n), kind="stable").astype(np.int64)


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
    """Validate and convert client seeds to a ``uint64`` vector (one seed per client), or pass
    a batch of secure keys (``[n, 4]`` ``uint64``, see :func:`fresh_keys`) through."""
    arr = np.asarray(seeds)
    if arr.ndim == 2 and arr.shape[1] == KEY_WORDS and arr.dtype == np.uint64:
        if n is not None and arr.shape[0] != n:
            raise ValueError(f"keys has {arr.shape[0]} rows but the batch has {n} clients")
        return arr
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
    """``count`` independent 64-bit words per client: shape ``[n, count]``.

    Seeds ``[n]``: SplitMix64 in counter mode (reproducible); keys ``[n, 4]``: ChaCha20 (secure).
    """
    if is_keys(seeds):
        return _chacha_bits(seeds, stream, count)
    key = splitmix64(seeds ^ np.uint64(stream_id(stream) * 0x100000001B3 & 0xFFFFFFFFFFFFFFFF))
    ctr = (np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN)[None, :]
    with np.errstate(over="ignore"):
        return splitmix64(key[:, None] + ctr)


def uniform(seeds: U64, stream: str, count: int) -> NDArray[np.float64]:
    """Uniform draws in ``[0, 1)`` with 53 random bits each, shape ``[n, count]``."""
    return _to_unit(raw_bits(seeds, stream, count))


def randint(seeds: U64, stream: str, count: int, high: int | NDArray[np.int64]) -> NDArray[np.int64]:
    """Integers uniform on ``{0, …, high-1}``, shape ``[n, count]``; ``high`` may differ per client (an
    array ``[n]``), and each row depends only on its own seed and ``high``.

    Uses the multiply-shift map on 53-bit uniforms; the bias is at most ``high / 2**53``.
    """
    hi = np.asarray(high, dtype=np.int64)
    if (hi < 1).any():
        raise ValueError(f"high must be >= 1, got {int(hi.min())}")
    hi = hi[:, None] if hi.ndim else hi
    u = uniform(seeds, stream, count)
    return np.minimum(np.floor(u * hi).astype(np.int64), hi - 1)


def normal(seeds: U64, stream: str, count: int) -> NDArray[np.float64]:
    """Standard normal draws (Box–Muller), shape ``[n, count]``."""
    return _box_muller(uniform(seeds, stream, 2 * ((count + 1) // 2)), count)


def sample_without_replacement(seeds: U64, stream: str, k: int, n_items: int | NDArray[np.int64]) -> NDArray[np.int64]:
    """``k`` distinct indices in ``{0..n_items-1}`` per client (Floyd's algorithm), ``[n, k]``.

    ``n_items`` may differ per client (an array); each row depends only on its own seed.
    """
    items = np.broadcast_to(np.asarray(n_items, dtype=np.int64), seeds.shape[:1])
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
