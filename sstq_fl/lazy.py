"""A module imported on its first attribute access, so that importing a module of the library (say, to list the
encoders' declarations) does not import torch, which takes seconds on a loaded machine.

A module using it writes ``if TYPE_CHECKING: import torch`` / ``else: torch = lazy_module("torch")``: type checkers
see the real module, and the code reads ``torch.<name>`` as usual (the first read imports torch; each name read is
then kept on the proxy, so a later read costs what a module attribute does).  The pattern is the one of
`SPEC 1 — Making it easier to use lazy loading <https://scientific-python.org/specs/spec-0001/>`_.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

_PROXIES: dict[str, LazyModule] = {}


class LazyModule:
    """Stands for the module ``name`` until an attribute is read; then imports it and answers from it."""

    def __init__(self, name: str) -> None:
        self.__name = name

    def __getattr__(self, attr: str) -> Any:
        """The module's ``attr`` (importing the module on the first read); kept here for the next read."""
        value = getattr(self.module(), attr)
        if not attr.startswith("__"):
            setattr(self, attr, value)
        return value

    def module(self) -> ModuleType:
        """The real module (imported now if it was not yet)."""
        mod = sys.modules.get(self.__name)
        return mod if mod is not None else importlib.import_module(self.__name)

    def __repr__(self) -> str:
        loaded = "loaded" if self.__name in sys.modules else "not yet imported"
        return f"<lazy module {self.__name!r} ({loaded})>"


def lazy_module(name: str) -> Any:
    """The one :class:`LazyModule` of ``name`` (typed ``Any``: a module declares the real one for type checkers)."""
    proxy = _PROXIES.get(name)
    if proxy is None:
        proxy = _PROXIES[name] = LazyModule(name)
    return proxy
