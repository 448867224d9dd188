"""Per-message public seeds: the randomness an encoder's client and server must share (candidates, a rotation,
a projection), either drawn by the client and sent with the message (``coin=message``) or derived from the
caller's public per-client coins (``coin=public``, then nothing extra is sent).

The seed is independent of the input, so it leaks nothing about it; the encoders' ε holds for every value of it.
One declaration of the two parameters (:func:`seed_params`), the wire field (:func:`seed_fields`), the client's
draw (:func:`draw_seed`), the caller's public coins checked (:func:`public_coins`), the 64-bit seed both sides
derive (:func:`public_seeds`) and the ``k`` coordinates an index-sampling encoder draws (:func:`sampled_indices`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import rng
from .base import Encoder, Field, Param


def seed_params(what: str, seed_bits: int = 20) -> dict[str, Param]:
    """``seed_bits`` and ``coin`` for an encoder whose ``what`` (e.g. ``"candidates"``) a per-message seed names."""
    return {
        "seed_bits": Param(int, seed_bits, f"bits of the per-message seed of the {what}, sent with the message "
                           "(coin=message)", low=0, high=32),
        "coin": Param(str, "message", f"{what} from a seed the client draws and sends, or from the caller's public "
                      "per-client coins (training supplies none)", ("message", "public")),
    }


def seed_fields(cfg: dict[str, Any]) -> list[Field]:
    """The wire field ``s`` of the sent seed (none with ``coin=public`` or ``seed_bits=0``)."""
    return [Field("s", cfg["seed_bits"])] if cfg["coin"] == "message" and cfg["seed_bits"] else []


def draw_seed(enc: Encoder, seeds: np.ndarray) -> np.ndarray:
    """The seed each client sends: ``seed_bits`` uniform bits of its own coins (stream ``<name>-seed``)."""
    return rng.randint(seeds, f"{enc.name}-seed", 1, 1 << enc.cfg["seed_bits"])[:, 0]


def public_coins(enc: Encoder, coins: Any, n: int) -> np.ndarray:
    """The public coin of each of ``n`` messages (``coin=public``): the caller's per-client coins (seeds or secure
    keys, :func:`sstq_fl.rng.as_seeds`; one coin may serve every message); none is a one-line error."""
    if coins is None:
        raise ValueError(f"{enc.name} with coin=public needs the public per-client coins")
    c = np.asarray(coins)
    return rng.as_seeds(np.repeat(c.reshape(1), n) if c.size == 1 and n != 1 else c, n)


def public_seeds(enc: Encoder, s: np.ndarray | None, coins: Any, n: int) -> np.ndarray:
    """The 64-bit seed of each of ``n`` messages: from the public coins (``coin=public``; one coin may serve every
    message) or the sent seed ``s``, each mixed with the encoder's public run seed."""
    if enc.cfg["coin"] == "public":
        return rng.raw_bits(public_coins(enc, coins, n), f"{enc.name}-public-{enc.seed}", 1)[:, 0]
    if s is None:
        raise ValueError(f"{enc.name} with coin=message needs each message's seed")
    return rng.derive_seeds(np.uint64(enc.seed), np.asarray(s, dtype=np.uint64))


def sampled_indices(enc: Encoder, seeds: np.ndarray | None, coins: Any, n: int, k: int, size: int) -> np.ndarray:
    """``k`` distinct coordinates below ``size`` for each of ``n`` messages (``[n, k]``): from the public coins
    (``coin=public``: the server derives them too, nothing is sent) or the clients' own ``seeds`` (``coin=private``:
    sent), on the streams ``<name>-public-index`` and ``<name>-index``."""
    if enc.cfg["coin"] == "public":
        return rng.sample_without_replacement(public_coins(enc, coins, n), f"{enc.name}-public-index", k, size)
    if seeds is None:
        raise ValueError(f"{enc.name} with coin=private draws its indices from the clients' own seeds")
    return rng.sample_without_replacement(seeds, f"{enc.name}-index", k, size)
