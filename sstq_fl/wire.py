"""Bit-exact wire format for encoder messages (no pickle, nothing executable).

A message is a fixed 16-byte framing header followed by the payload:

```text
magic "SQ" | version u8 | flags u8 (0) | fingerprint u32 | round u32 | payload_bits u32
```

all big-endian.  ``fingerprint`` is the CRC-32 of the encoder's public configuration, so a
message produced under another encoder, dimension, ε, radius or frame seed is rejected as
foreign.  The payload holds exactly ``payload_bits`` bits: float32 fields first
(little-endian IEEE-754), then the unsigned fields packed MSB-first with no gaps; only the
final byte is padded, with zero bits.  The header is reported separately from the payload.

Decoding validates everything (length, magic, version, flags, fingerprint, round, declared
bits, padding, each field's range, float finiteness, then the encoder's own checks) and
raises :class:`~sstq_fl.encoders.base.WireError` naming the problem; an invalid message is
never decoded into a vector.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import torch

from .encoders.base import Encoder, Field, Messages, WireError

MAGIC = b"SQ"
VERSION = 1
HEADER = struct.Struct(">2sBBIII")
HEADER_BYTES = HEADER.size


def payload_bytes(encoder: Encoder) -> int:
    return _split_bytes(encoder.layout())[2]


def _split_bytes(layout: list[Field]) -> tuple[list[Field], list[Field], int]:
    floats = [f for f in layout if f.kind == "f32"]
    uints = [f for f in layout if f.kind == "uint"]
    if len(floats) + len(uints) != len(layout):
        raise ValueError("field kinds must be 'uint' or 'f32'")
    fbytes = 4 * sum(f.count for f in floats)
    ubits = sum(f.total_bits for f in uints)
    return floats, uints, fbytes + (ubits + 7) // 8


def pack(encoder: Encoder, msgs: Messages, round: int = 0) -> list[bytes]:
    """Serialise a batch of messages, one ``bytes`` object per client."""
    floats, uints, nbytes = _split_bytes(encoder.layout())
    n = msgs.n
    parts: list[np.ndarray] = []
    for f in floats:
        v = msgs.fields[f.name].detach().to("cpu", torch.float32).numpy().reshape(n, f.count)
        parts.append(np.ascontiguousarray(v.astype("<f4")).view(np.uint8).reshape(n, 4 * f.count))
    if uints:
        bits = [_to_bits(msgs.fields[f.name], f, n) for f in uints]
        parts.append(np.packbits(np.concatenate(bits, axis=1), axis=1, bitorder="big"))
    body = np.concatenate(parts, axis=1) if parts else np.zeros((n, 0), np.uint8)
    assert body.shape[1] == nbytes
    head = HEADER.pack(MAGIC, VERSION, 0, encoder.fingerprint, round & 0xFFFFFFFF, encoder.payload_bits())
    return [head + body[i].tobytes() for i in range(n)]


def _to_bits(t: torch.Tensor, f: Field, n: int) -> np.ndarray:
    v = t.detach().to("cpu", torch.int64).numpy().reshape(n, f.count)
    limit = f.limit if f.limit is not None else 1 << f.bits
    if (v < 0).any() or (v >= limit).any():
        raise ValueError(f"field {f.name!r} holds values outside [0, {limit})")
    shifts = np.arange(f.bits - 1, -1, -1, dtype=np.uint64)
    return ((v.astype(np.uint64)[..., None] >> shifts) & np.uint64(1)).astype(np.uint8).reshape(n, f.total_bits)


def unpack(encoder: Encoder, blobs: Sequence[bytes], round: int | None = None) -> Messages:
    """Parse and validate a batch; raise :class:`WireError` on the first invalid message."""
    msgs, rejected = unpack_lenient(encoder, blobs, round)
    if rejected:
        i, why = rejected[0]
        raise WireError(f"message {i}: {why}")
    return msgs


def unpack_lenient(encoder: Encoder, blobs: Sequence[bytes], round: int | None = None
                   ) -> tuple[Messages, list[tuple[int, str]]]:
    """Parse a batch, keeping the valid messages: ``(messages, [(index, reason), …])``."""
    layout = encoder.layout()
    floats, uints, nbytes = _split_bytes(layout)
    rejected: list[tuple[int, str]] = []
    good: list[int] = []
    for i, blob in enumerate(blobs):
        why = _check_frame(encoder, blob, nbytes, round)
        if why:
            rejected.append((i, why))
        else:
            good.append(i)
    body = np.frombuffer(b"".join(blobs[i][HEADER_BYTES:] for i in good), np.uint8).reshape(len(good), nbytes)
    fields, bad = _parse_fields(body, floats, uints)
    keep = np.ones(len(good), bool)
    for row, why in bad:
        keep[row] = False
        rejected.append((good[row], why))
    msgs = Messages({k: v[torch.from_numpy(keep)] for k, v in fields.items()})
    if keep.any():
        try:
            encoder.check(msgs)
        except WireError:  # find the offending rows one by one
            rows = np.nonzero(keep)[0]
            ok = np.ones(len(rows), bool)
            for j, r in enumerate(rows):
                try:
                    encoder.check(msgs.select([j]))
                except WireError as exc:
                    ok[j] = False
                    rejected.append((good[int(r)], str(exc)))
            msgs = msgs.select(np.nonzero(ok)[0].tolist())
    rejected.sort()
    return msgs, rejected


def _check_frame(encoder: Encoder, blob: bytes, nbytes: int, round: int | None) -> str | None:
    if not isinstance(blob, bytes | bytearray | memoryview):
        return f"message is {type(blob).__name__}, not bytes"
    if len(blob) < HEADER_BYTES:
        return f"truncated: {len(blob)} bytes is shorter than the {HEADER_BYTES}-byte header"
    magic, ver, flags, fp, rnd, bits = HEADER.unpack_from(blob)
    if magic != MAGIC:
        return f"bad magic {magic!r} (not an sstq-fl message)"
    if ver != VERSION:
        return f"unsupported wire version {ver} (expected {VERSION})"
    if flags != 0:
        return f"unknown header flags {flags:#x}"
    if round is not None and rnd != round & 0xFFFFFFFF:
        return f"message for round {rnd}, expected round {round}"
    if fp != encoder.fingerprint:
        return f"foreign message: fingerprint {fp:#010x} does not match encoder {encoder.spec!r} ({encoder.fingerprint:#010x})"
    if int(bits) != encoder.payload_bits():
        return f"declares {bits} payload bits, encoder {encoder.spec!r} sends {encoder.payload_bits()}"
    got: int = len(blob) - HEADER_BYTES
    if got < nbytes:
        return f"truncated: payload has {got} bytes, expected {nbytes}"
    if got > nbytes:
        return f"oversized: payload has {got} bytes, expected {nbytes}"
    return None


def _parse_fields(body: np.ndarray, floats: list[Field], uints: list[Field]
                  ) -> tuple[dict[str, torch.Tensor], list[tuple[int, str]]]:
    n = body.shape[0]
    bad: dict[int, str] = {}
    out: dict[str, torch.Tensor] = {}
    off = 0
    for f in floats:
        v = body[:, off : off + 4 * f.count].copy().view("<f4").astype(np.float32)
        off += 4 * f.count
        for row in np.nonzero(~np.isfinite(v).all(axis=1))[0]:
            bad.setdefault(int(row), f"field {f.name!r} holds NaN or infinite floats")
        out[f.name] = torch.from_numpy(np.nan_to_num(v))
    if uints:
        total = sum(f.total_bits for f in uints)
        bits = np.unpackbits(body[:, off:], axis=1, bitorder="big")
        for row in np.nonzero(bits[:, total:].any(axis=1))[0]:
            bad.setdefault(int(row), "non-zero padding bits after the payload")
        pos = 0
        for f in uints:
            chunk = bits[:, pos : pos + f.total_bits].reshape(n, f.count, f.bits).astype(np.int64)
            pos += f.total_bits
            vals = (chunk << np.arange(f.bits - 1, -1, -1, dtype=np.int64)).sum(-1)
            limit = f.limit if f.limit is not None else 1 << f.bits
            for row in np.nonzero((vals >= limit).any(axis=1))[0]:
                bad.setdefault(int(row), f"field {f.name!r} out of range (must be < {limit})")
            out[f.name] = torch.from_numpy(vals)
    return out, sorted(bad.items())
