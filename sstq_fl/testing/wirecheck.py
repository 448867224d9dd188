"""Checks ``wire-roundtrip`` and ``wire-rejection`` against the bit-exact format of :mod:`sstq_fl.wire`.

Round trip: encode → bytes → decode gives the same fields and the same estimates.  Rejection: truncated,
oversized, foreign (another configuration's fingerprint, or another round's public frame), wrong-round,
out-of-range and non-finite messages raise :class:`~sstq_fl.encoders.base.WireError`; and every message the
wire format accepts — random payloads included — decodes to a finite vector without any other exception (so a
layout that leaves invalid values representable, or a ``check`` that lets them through, is caught when
``decode`` trips over them).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from .. import wire
from ..encoders.base import Encoder, Field, Messages, WireError
from ..errors import described
from . import inputs
from .bits import fields_match_layout
from .report import CheckResult, failed, passed

ROUNDTRIP, REJECTION = "wire-roundtrip", "wire-rejection"
MESSAGES, FUZZ = 48, 256


def _sample(enc: Encoder, n: int = MESSAGES) -> tuple[Messages, np.ndarray]:
    s = inputs.seeds("wire", n)
    return enc.encode(inputs.mixed_batch(enc, n), s, coins=inputs.coins(s)), inputs.coins(s)


def check_roundtrip(enc: Encoder) -> CheckResult:
    """Fields have the layout's names and shapes, and survive pack/unpack bit for bit."""
    msgs, c = _sample(enc)
    why = fields_match_layout(enc, msgs.fields, msgs.n)
    if why:
        return failed(ROUNDTRIP, why)
    back = wire.unpack(enc, wire.pack(enc, msgs, round=5), round=5)
    for f in enc.layout():
        a, b = msgs.fields[f.name].cpu(), back.fields[f.name].cpu()
        same = torch.equal(a.float(), b.float()) if f.kind == "f32" else torch.equal(a.long(), b.long())
        if not same:
            return failed(ROUNDTRIP, f"field {f.name!r} changed through pack/unpack")
    x1, x2 = enc.decode(msgs, coins=c), enc.decode(back, coins=c)
    if not torch.allclose(x1.double(), x2.double(), rtol=1e-12, atol=0.0):
        return failed(ROUNDTRIP, "decoding the unpacked messages gives other estimates than the originals")
    return passed(ROUNDTRIP, f"{msgs.n} messages: fields match the layout and survive encode → bytes → decode "
                             f"exactly; estimates equal")


def check_rejection(enc: Encoder, other: Encoder | None) -> CheckResult:
    """Every malformed or foreign message raises ``WireError``; whatever is accepted decodes to finite values."""
    msgs, _ = _sample(enc, 4)
    blob = wire.pack(enc, msgs.select([0]), round=3)[0]
    cases: list[tuple[str, bytes]] = [("truncated by one byte", blob[:-1]), ("header only", blob[: wire.HEADER_BYTES]),
                                      ("one byte too many", blob + b"\0"), ("bad magic", b"XX" + blob[2:])]
    if other is not None:
        cases.append(("foreign (another configuration)", wire.pack(other, other.encode(
            inputs.mixed_batch(other, 1), inputs.seeds("foreign", 1), coins=inputs.coins(inputs.seeds("foreign", 1))),
            round=3)[0]))
    cases += _out_of_range(enc, msgs)
    for label, bad in cases:
        if not _raises_wire_error(partial(wire.unpack, enc, [bad], round=3)):
            return failed(REJECTION, f"a message {label} was accepted (expected WireError)")
    if not _raises_wire_error(lambda: wire.unpack(enc, [blob], round=4)):
        return failed(REJECTION, "a message for round 3 was accepted as round 4")
    why = _other_rounds_frame(enc)
    if why:
        return failed(REJECTION, why)
    why = _fuzz(enc)
    if why:
        return failed(REJECTION, why)
    return passed(REJECTION, f"{len(cases) + 1} malformed/foreign messages raise WireError; {FUZZ} random payloads: "
                             f"each rejected or decoded to a finite vector")


def _raises_wire_error(call: Callable[[], object]) -> bool:
    try:
        call()
    except WireError:
        return True
    return False


def forge(enc: Encoder, values: dict[str, np.ndarray], round: int = 3) -> bytes:
    """One message with the given raw field values (no range checks): what a malicious client could send."""
    floats = [f for f in enc.layout() if f.kind == "f32"]
    uints = [f for f in enc.layout() if f.kind == "uint"]
    body = b"".join(np.asarray(values[f.name], "<f4").reshape(f.count).tobytes() for f in floats)
    bits = [((int(v) >> np.arange(f.bits - 1, -1, -1)) & 1) for f in uints for v in np.asarray(values[f.name]).ravel()]
    if bits:
        body += np.packbits(np.concatenate(bits).astype(np.uint8), bitorder="big").tobytes()
    head = wire.HEADER.pack(wire.MAGIC, wire.VERSION, 0, enc.fingerprint, round, enc.payload_bits())
    return head + body


def _values(msgs: Messages, row: int) -> dict[str, np.ndarray]:
    return {k: v[row].cpu().numpy().copy() for k, v in msgs.fields.items()}


def _other_rounds_frame(enc: Encoder) -> str | None:
    """Where the public parameters change per round (:meth:`Encoder.for_round`, e.g. a frame drawn afresh), a
    message made on round 2's parameters but labelled round 3 must be foreign to round 3's encoder."""
    r2, r3 = enc.for_round(2), enc.for_round(3)
    if r2.fingerprint == r3.fingerprint:
        return None
    s = inputs.seeds("other-round", 1)
    blob = wire.pack(r2, r2.encode(inputs.mixed_batch(r2, 1), s, coins=inputs.coins(s)), round=3)[0]
    if not _raises_wire_error(partial(wire.unpack, r3, [blob], round=3)):
        return "a message made on round 2's public frame was accepted by round 3's encoder"
    return None


def _out_of_range(enc: Encoder, msgs: Messages) -> list[tuple[str, bytes]]:
    """For each field: a value at its declared limit (uint fields whose limit is below ``2^bits``), or NaN (f32)."""
    out = []
    for f in enc.layout():
        vals = _values(msgs, 0)
        if f.kind == "f32":
            vals[f.name] = vals[f.name].astype(np.float32)
            vals[f.name].reshape(-1)[0] = np.nan
            out.append((f"with NaN in field {f.name!r}", forge(enc, vals)))
        elif _limit(f) < 1 << f.bits:
            vals[f.name] = vals[f.name].astype(np.int64)
            vals[f.name].reshape(-1)[0] = _limit(f)
            out.append((f"with field {f.name!r} = {_limit(f)} (limit {_limit(f)})", forge(enc, vals)))
    return out


def _limit(f: Field) -> int:
    return f.limit if f.limit is not None else 1 << f.bits


def _fuzz(enc: Encoder) -> str | None:
    """Random payloads (fixed seed): each must be rejected, or accepted and decoded to finite values."""
    gen = np.random.default_rng(1234)
    nbytes = wire.payload_bytes(enc)
    total = enc.payload_bits()
    for i in range(FUZZ):
        body = bytearray(gen.integers(0, 256, nbytes, dtype=np.uint8).tobytes())
        if total % 8 and nbytes:
            body[-1] &= (0xFF << (8 - total % 8)) & 0xFF  # zero padding: only the fields are random
        head = wire.HEADER.pack(wire.MAGIC, wire.VERSION, 0, enc.fingerprint, 3, total)
        try:
            msg = wire.unpack(enc, [head + bytes(body)], round=3)
        except WireError:
            continue
        try:
            est = enc.decode(msg, coins=inputs.coins(inputs.seeds("fuzz", 1, i)))
        except Exception as exc:  # any failure of the encoder's decode on an accepted message
            return f"random payload {i} was accepted ({_show(msg)}) but decode raised {described(exc)}"
        if not bool(torch.isfinite(est).all()):
            return f"random payload {i} was accepted ({_show(msg)}) and decoded to non-finite values"
    return None


def _show(msg: Messages) -> str:
    return ", ".join(f"{k}={v[0].tolist()[:4]}" for k, v in msg.fields.items())
