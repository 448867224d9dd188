"""Execution backends outside the core, found by entry point (group ``sstq_fl.backends``).

The core never imports Flower, ``strategies/`` or ``clients/``: where a run asks for the Flower
engine, it looks the backend up by name here, and the package's ``pyproject.toml`` declares which
edge function serves it (``flower-train``, ``flower-train-many``, ``flower-workload``).  Another
distribution can add or replace a backend the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

GROUP = "sstq_fl.backends"


def backend(name: str) -> Callable[..., Any]:
    """The callable registered as backend ``name``; a one-line error when none is installed."""
    found = {ep.name: ep for ep in metadata.entry_points(group=GROUP)}
    if name not in found:
        raise ValueError(f"no execution backend {name!r} is installed (entry points {GROUP}: {sorted(found)}); "
                         f"reinstall sstq-fl (bash scripts/setup.sh)")
    fn = found[name].load()
    if not callable(fn):
        raise ValueError(f"execution backend {name!r} ({found[name].value}) is not callable")
    return fn  # type: ignore[no-any-return]
