"""Check ``bits``: the declared payload equals the layout, the bit formula and what the wire format sends."""

from __future__ import annotations

import torch

from .. import wire
from ..encoders import formula
from ..encoders.base import Encoder
from . import inputs
from .report import CheckResult, failed, passed

NAME = "bits"
MESSAGES = 32


def check_bits(enc: Encoder) -> CheckResult:
    """``payload_bits() == Σ layout bits == bits_formula`` and every packed message is the header plus
    ``⌈payload_bits/8⌉`` bytes whose header declares ``payload_bits``."""
    declared = enc.payload_bits()
    layout = enc.layout()
    summed = sum(f.total_bits for f in layout)
    parts = " + ".join(f"{f.name} {f.total_bits}" for f in layout)
    if summed != declared:
        return failed(NAME, f"payload_bits() = {declared} but the layout's fields sum to {summed} ({parts})")
    if not enc.bits_formula:
        return failed(NAME, f"no bits_formula declared (layout: {declared} bits = {parts})")
    shown = formula.render(enc.bits_formula)
    try:
        by_formula = enc.formula_bits()
    except (ValueError, ArithmeticError, TypeError) as exc:
        return failed(NAME, f"bits formula {enc.bits_formula!r} cannot be evaluated: {exc}")
    if by_formula != declared:
        return failed(NAME, f"bits formula {shown} gives {by_formula} with {_quantities(enc)}, "
                            f"but the layout sends {declared} ({parts})")
    return _wire_bits(enc, declared, f"payload {declared} bits = layout ({parts}) = formula {shown}")


def _wire_bits(enc: Encoder, declared: int, said: str) -> CheckResult:
    x = inputs.mixed_batch(enc, MESSAGES)
    s = inputs.seeds(NAME, MESSAGES)
    msgs = enc.encode(x, s, coins=inputs.coins(s))
    try:
        blobs = wire.pack(enc, msgs)
    except (ValueError, RuntimeError, KeyError) as exc:
        return failed(NAME, f"{said}, but the wire encoder refused the messages: {exc}")
    want = wire.HEADER_BYTES + (declared + 7) // 8
    sizes = sorted({len(b) for b in blobs})
    if sizes != [want]:
        return failed(NAME, f"{said}, but packed messages are {sizes} bytes, expected {want} "
                            f"({wire.HEADER_BYTES}-byte header + ceil({declared}/8))")
    header = {wire.HEADER.unpack_from(b)[5] for b in blobs}
    if header != {declared}:
        return failed(NAME, f"{said}, but packed headers declare {sorted(header)} payload bits")
    return passed(NAME, f"{said}; wire: {MESSAGES} messages of {wire.HEADER_BYTES} + {want - wire.HEADER_BYTES} bytes")


def _quantities(enc: Encoder) -> str:
    q = enc.bits_quantities()
    used = formula.names(enc.bits_formula)
    return ", ".join(f"{k}={q[k]}" for k in sorted(used) if k in q) or "no quantities"


def fields_match_layout(enc: Encoder, fields: dict[str, torch.Tensor], n: int) -> str | None:
    """Why the message fields do not have the layout's names and ``[n, count]`` shapes (``None``: they do)."""
    names = {f.name for f in enc.layout()}
    if set(fields) != names:
        return f"message fields {sorted(fields)} differ from the layout's {sorted(names)}"
    for f in enc.layout():
        if tuple(fields[f.name].shape) != (n, f.count):
            return f"field {f.name!r} has shape {tuple(fields[f.name].shape)}, expected {(n, f.count)}"
    return None
