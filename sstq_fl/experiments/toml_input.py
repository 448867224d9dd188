"""An experiment file's bytes as a TOML document, refused in one line when it is not UTF-8 TOML or nests too deep."""

from __future__ import annotations

import tomllib
from typing import Any

MAX_DEPTH = 32
"""The deepest nesting of tables and lists an experiment file may have."""


def parse_toml(raw: bytes, path: str) -> dict[str, Any]:
    """The TOML document ``raw``; one line naming ``path`` when it is not UTF-8 TOML or is nested deeper
    than :data:`MAX_DEPTH` (the parser's own recursion included)."""
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deep (at most {MAX_DEPTH} levels of tables and lists)") from None
    if depth(doc) > MAX_DEPTH:
        raise ValueError(f"{path}: nested too deep (at most {MAX_DEPTH} levels of tables and lists)")
    return doc


def depth(value: Any) -> int:
    """How deeply ``value`` nests dicts and lists (a scalar: 0), found without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d + 1)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest
