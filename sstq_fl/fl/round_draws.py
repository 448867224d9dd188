"""A round's draws: minibatches, participation and coins, all derived per (seed, round, client) (the
client partitions themselves are :mod:`sstq_fl.data.partitioners`')."""

from __future__ import annotations

import numpy as np

from .. import rng

__all__ = ["client_coins", "encoder_seeds", "minibatch", "minibatches", "participates"]


def minibatch(shard: np.ndarray, batch: int, seed: int, round: int, client: int) -> np.ndarray:
    """One client's minibatch for a round (see :func:`minibatches`)."""
    return minibatches([shard], batch, seed, round, np.array([client]))[0]


def minibatches(shards: list[np.ndarray], batch: int, seed: int, round: int, clients: np.ndarray,
                keys: np.ndarray | None = None) -> np.ndarray:
    """Minibatches ``[len(clients), batch]`` of record indices, ``shards[i]`` belonging to
    ``clients[i]``: ``batch`` records drawn without replacement (with replacement from a shard
    smaller than the batch).  Row ``i`` depends only on ``(seed, round, clients[i])`` and the
    shard, so every encoder and engine sees the same batches.  With ``keys`` (secure mode:
    each client's secret key, see :func:`client_coins`) row ``i`` depends only on ``keys[i]``."""
    clients = np.asarray(clients, dtype=np.int64)
    s = rng.derive_seeds(seed, round, clients, 0xB47) if keys is None else rng.as_seeds(keys, len(clients))
    sizes = np.array([len(sh) for sh in shards], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    records = np.concatenate([np.asarray(sh, dtype=np.int64) for sh in shards]) if len(shards) else sizes
    pos = np.empty((len(shards), batch), dtype=np.int64)  # positions within each client's shard
    big = sizes >= batch
    if big.any():
        pos[big] = rng.sample_without_replacement(s[big], "minibatch", batch, sizes[big])
    if not big.all():
        pos[~big] = rng.randint(s[~big], "minibatch-small", batch, sizes[~big])
    return records[starts[:, None] + pos]


def participates(seed: int, round: int, clients: int, rate: float, randomness: str = "reproducible") -> np.ndarray:
    """Poisson participation: client ``c`` joins round ``t`` w.p. ``rate`` (per (seed, t, c); in
    secure mode from the server's OS CSPRNG, never recorded)."""
    if rate >= 1:
        return np.ones(clients, bool)
    if rng.check_mode(randomness) == "secure":
        return rng.secure_uniform(clients) < rate
    s = rng.derive_seeds(seed, round, np.arange(clients), 0x5A3)
    return rng.uniform(s, "participation", 1)[:, 0] < rate


def encoder_seeds(seed: int, round: int, clients: np.ndarray) -> np.ndarray:
    """Per-client encoding seeds for a round in reproducible mode (known to whoever holds ``seed``)."""
    return rng.derive_seeds(seed, round, np.asarray(clients, dtype=np.int64), 0xE4C)


def client_coins(randomness: str, seed: int, round: int, clients: np.ndarray) -> np.ndarray | None:
    """Each client's secret for a round: ``None`` in reproducible mode (minibatches and encoding
    coins are derived from ``(seed, round, client)``), or, in secure mode, a fresh 256-bit key per
    client drawn from the OS CSPRNG **on the client**; it keys both its record sampling and its
    encoding coins (ChaCha20, :mod:`sstq_fl.rng`) and is never sent, stored or logged."""
    if rng.check_mode(randomness) == "secure":
        return rng.fresh_keys(len(clients))
    return None
