"""LDP vector encoders: one module each, looked up by spec strings through a registry."""

from .base import (
    ENTRY_POINT_GROUP,
    Accumulator,
    Encoder,
    Field,
    Messages,
    Param,
    WireError,
    make_encoder,
    parse_spec,
    register_encoder,
    registry,
)

__all__ = [
    "ENTRY_POINT_GROUP", "Accumulator", "Encoder", "Field", "Messages", "Param", "WireError",
    "make_encoder", "parse_spec", "register_encoder", "registry",
]
