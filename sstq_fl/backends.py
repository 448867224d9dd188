"""Execution backends outside the core, found by entry point (group ``sstq_fl.backends``).

The core never imports Flower or the Flower apps (:mod:`sstq_fl.flower.apps`): where a run asks for the Flower
engine, it looks the backend up by name here, and the package's ``pyproject.toml`` declares which
edge function serves it (``flower-train``, ``flower-train-many``, ``flower-workload``).  Another
distribution can add a backend the same way.  The backends form a
:class:`~sstq_fl.registry.Registry`: every entry point of the group is loaded on the first look-up,
and one that fails to load, is not callable or takes a name already registered is skipped with a
one-line :class:`~sstq_fl.registry.PluginWarning`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from .registry import Registry, UnknownName

GROUP = "sstq_fl.backends"

BACKENDS: Registry[Callable[..., Any]] = Registry("execution backend", group=GROUP, accepts=callable, kind="a callable")
"""The execution backends by name, all from entry points (a broken one is skipped with a PluginWarning)."""


def backend(name: str) -> Callable[..., Any]:
    """The callable registered as backend ``name``, resolved from its entry point at each call (a backend is
    looked up once per run, and the module attribute it names is what runs); a one-line error when none is
    installed."""
    try:
        BACKENDS[name]
    except UnknownName:
        raise ValueError(f"no execution backend {name!r} is installed (entry points {GROUP}: {BACKENDS.names()}); "
                         f"reinstall sstq-fl (bash scripts/setup.sh)") from None
    return next(iter(metadata.entry_points(group=GROUP, name=name))).load()  # type: ignore[no-any-return]
