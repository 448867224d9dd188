"""The server side of one LDP round, shared by every engine: validate the wire bytes, decode,
average in the encoder's accumulation space, cap the norm, and charge the ledger.

The in-process engine (:class:`sstq_fl.fl.engine.Trainer`) and the Flower strategy wrapper
(:class:`sstq_fl.flower.LdpDecoding`) both call :func:`decode_mean` and :func:`charge_joins`, so
the same bytes give the same aggregate on both (tests/flower/test_simulation.py checks it to 1e-6).

The mean of ``n`` unbiased per-message estimates ``x̂_i`` (Feldman & Talwar 2021; Chen, Kairouz &
Özgür 2020) is unbiased for the mean of the clipped inputs, with variance ``(1/n²) Σ Var(x̂_i)``.
Averaging in the accumulation space (for SSTQ the frame coefficients, one frame synthesis per
round) is the same linear map as averaging decoded vectors, at one synthesis instead of ``n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from . import wire
from .encoders import Encoder
from .privacy.ledger import PrivacyLedger
from .stages import stage


@dataclass
class DecodedRound:
    """What the server learnt from one round's wire messages.

    ``mean``: the (capped) average of the accepted messages' estimates, ``None`` if none was
    valid; ``rejected``: ``(index into the blobs, reason)``; ``bytes_per_message``: the average
    size of the messages received, header included."""

    mean: torch.Tensor | None
    rejected: list[tuple[int, str]] = field(default_factory=list)
    accepted: int = 0
    bytes_per_message: float = 0.0


def cap_norm(g: torch.Tensor, cap: float | None) -> torch.Tensor:
    """``g · min(1, cap/‖g‖₂)``: public post-processing of a decoded mean (no privacy cost)."""
    if cap is None:
        return g
    norm = float(torch.linalg.vector_norm(g))
    return g * (cap / norm) if norm > cap else g


def decode_mean(enc: Encoder, blobs: Sequence[bytes], round: int, cap: float | None = None,
                dtype: torch.dtype = torch.float32) -> DecodedRound:
    """Validate ``blobs`` (round ``round``, :func:`sstq_fl.wire.unpack_lenient`), average the valid
    ones with :meth:`Encoder.aggregate` in ``dtype`` and cap the mean's norm at ``cap``."""
    if not len(blobs):
        return DecodedRound(None)
    with stage("unpack"):
        got, rejected = wire.unpack_lenient(enc, blobs, round=round)
    size = float(np.mean([len(b) for b in blobs]))
    with stage("aggregate"):
        mean = cap_norm(enc.aggregate(got).to(dtype), cap) if got.n else None
    return DecodedRound(mean, rejected, got.n, size)


def charge_joins(ledger: PrivacyLedger, enc: Encoder, joins: Sequence[int] | np.ndarray, round: int | None = None) -> None:
    """Charge ``ledger`` up to the busiest client: one ε-LDP event per message that client sent.

    Each message of a client is one ``enc.privacy_event()``; messages of different clients are
    about different people, so the run's ε is that of the client with the most messages
    (``max(joins)``), composed over its messages (parallel composition across clients).  With
    ``round``, the charge is one transcript line of its own, ``meta: {"round": round}`` (a
    transcript that only appends: a resumed run's ledger is its replay)."""
    busiest = int(np.max(joins, initial=0))
    more = busiest - sum(e.count for e in ledger.entries)
    if more > 0:
        ledger.record(enc.privacy_event(), more, meta=None if round is None else {"round": round})

