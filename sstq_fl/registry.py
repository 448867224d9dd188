"""One registry helper for every named extension point of sstq-fl.

Encoders, FL tasks, DP generative pipelines, client tasks, models, privacy events, FWHT kernels
and execution backends are each a :class:`Registry`.  Every registry follows the same rules,
in the manner of Opacus' decorator registries:

* ``@REG.register("name")`` (or ``REG.register("name", obj)``) adds an entry; a second,
  different object under a taken name is a one-line ``ValueError`` naming both.
* Built-in entries live in modules that register themselves on import; a registry names those
  modules (``builtins=``) and imports them on first look-up, so importing the registry is cheap
  and has no import cycle with the modules that fill it.
* Where users extend (encoders, FL tasks, pipelines), a registry also names an entry-point
  group (``group=``): each entry point of that group is loaded once, on first look-up.  A
  plug-in that fails to import, is of the wrong kind, or takes a name already registered is
  skipped with a one-line :class:`PluginWarning` naming it and its distribution, so one broken
  plug-in never breaks a command.
* Every entry records where it came from (:meth:`Registry.origin`): a built-in module, an entry
  point with its distribution's name and version, or a registration at run time.
* ``REG[name]`` of an unknown name is an :class:`UnknownName` error (a ``ValueError`` and a
  ``KeyError``) listing the registered names; ``names()``, ``items()`` and ``in`` list entries.
  A plug-in that was skipped is remembered with its one-line reason (:meth:`Registry.refused`), and
  ``REG[name]`` of its name says ``<what> plug-in NAME was refused at registration: <reason>``.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, TypeVar

from .errors import described

T = TypeVar("T")


class PluginWarning(UserWarning):
    """A plug-in that could not be registered; it is skipped and everything else works."""


@dataclass(frozen=True)
class Origin:
    """Where a registry entry came from: ``kind`` is ``"built-in"``, ``"entry point"`` or ``"registered"``
    (by a decorator or call at run time outside the built-in modules); ``module`` defines the entry;
    ``distribution`` and ``version`` name the installed distribution of an entry point, when known."""

    kind: str
    module: str
    distribution: str | None = None
    version: str | None = None

    @property
    def plugin(self) -> bool:
        return self.kind == "entry point"

    def label(self) -> str:
        """``built-in``, ``plug-in <distribution> <version>`` or ``registered by <module>``."""
        if self.kind == "built-in":
            return "built-in"
        if self.plugin:
            return " ".join(["plug-in", self.distribution or f"(package {self.module.partition('.')[0]})",
                             *([self.version] if self.version else [])])
        return f"registered by {self.module}"


class UnknownName(ValueError, KeyError):
    """A look-up of a name no entry has; the message lists the registered names."""

    def __str__(self) -> str:
        """The message itself (``KeyError`` would quote it)."""
        return str(self.args[0]) if self.args else ""


def _describe(obj: Any) -> str:
    """``module.qualname`` of a class or function, else its type and a short repr."""
    name = getattr(obj, "__qualname__", None)
    return f"{getattr(obj, '__module__', '?')}.{name}" if name else f"{type(obj).__name__} {obj!r:.60}"


class Registry(Generic[T]):
    """Named entries of one kind (``what``: "encoder", "privacy event", ...).

    ``builtins``: modules imported on first look-up (they register the built-in entries);
    ``group``: the entry-point group whose plug-ins are loaded on first look-up (``None``: none);
    ``accepts`` / ``kind``: the check a plug-in's object must pass and how to name what it must be
    ("an Encoder subclass"); ``on_register``: called with ``(name, obj)`` each time an entry is
    registered, built-in or plug-in, after the duplicate check (the encoder registry uses it to set
    ``cls.name``)."""

    def __init__(self, what: str, *, builtins: Sequence[str] = (), group: str | None = None,
                 accepts: Callable[[Any], bool] | None = None, kind: str = "",
                 on_register: Callable[[str, T], Any] | None = None) -> None:
        self.what, self.group, self.kind = what, group, kind or what
        self._builtins = tuple(builtins)
        self._accepts = accepts
        self._on_register = on_register
        self._entries: dict[str, T] = {}
        self._origins: dict[str, Origin] = {}
        self._refused: dict[str, tuple[str, str]] = {}  # name -> (the plug-in, why it was not registered)
        self._builtins_loaded = self._plugins_loaded = False

    def register(self, name: str, obj: T | None = None) -> Any:
        """Add ``obj`` under ``name``; without ``obj``, a decorator that adds what it decorates."""
        if obj is not None:
            self._add(name, obj)
            return obj

        def deco(target: T) -> T:
            self._add(name, target)
            return target

        return deco

    def _add(self, name: str, obj: T, origin: Origin | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"the name of the {self.what} must be a non-empty string, got {name!r}")
        taken = self._entries.get(name)
        if taken is not None and taken is not obj:
            raise ValueError(f"the {self.what} named {name!r} is already registered ({_describe(taken)}); "
                             f"{_describe(obj)} cannot take its name")
        if self._on_register is not None:
            self._on_register(name, obj)
        self._entries[name] = obj
        if origin is None:
            module = str(getattr(obj, "__module__", "?"))
            origin = Origin("built-in" if module in self._builtins else "registered", module)
        self._origins.setdefault(name, origin)

    def load(self) -> None:
        """Import the built-in modules and load the entry-point plug-ins (once)."""
        self._load_builtins()
        if not self._plugins_loaded and self.group is not None:
            self._plugins_loaded = True
            for ep in metadata.entry_points(group=self.group):
                self._load_plugin(ep)

    def _load_builtins(self) -> None:
        if not self._builtins_loaded:
            self._builtins_loaded = True
            for module in self._builtins:
                importlib.import_module(module)

    def _load_plugin(self, ep: Any) -> None:
        """Register one entry point's object, or warn (one line) why it is skipped and remember the reason."""
        try:
            obj = ep.load()
        except Exception as exc:  # any failure of third-party code: skip that plug-in only
            self._refuse(ep, f"loading it failed ({described(exc)})", "skipped")
            return
        if self._accepts is not None and not self._accepts(obj):
            self._refuse(ep, f"it is {type(obj).__name__} {obj!r:.60}, not {self.kind}", "skipped")
            return
        taken = self._entries.get(ep.name)
        if taken is not None and taken is not obj:
            self._refuse(ep, f"the name {ep.name!r} is already registered by {_describe(taken)}")
            return
        dist = getattr(ep, "dist", None)
        origin = Origin("entry point", str(ep.value).partition(":")[0].strip() or "?",
                        getattr(dist, "name", None), getattr(dist, "version", None))
        try:
            self._add(ep.name, obj, origin)
        except ValueError as exc:  # refused by the registry's own rules (e.g. an encoder missing a declaration)
            self._refuse(ep, " ".join(str(exc).split()))

    def _refuse(self, ep: Any, reason: str, verb: str = "refused") -> None:
        """Warn that the entry point ``ep`` is not registered (``<plug-in> refused: reason``) and remember why,
        unless its name belongs to another entry (a look-up of the name finds that one)."""
        warnings.warn(f"{self._origin(ep)} {verb}: {reason}", PluginWarning, stacklevel=6)
        if ep.name not in self._entries:
            self._refused[ep.name] = (self._origin(ep), reason)

    def refused(self) -> dict[str, str]:
        """The plug-ins that were not registered, by name: ``<what> plug-in NAME = VALUE (distribution D) was refused
        at registration: <reason>``, one line each (plug-ins loaded first)."""
        self.load()
        return {name: f"{where} was refused at registration: {why}" for name, (where, why) in self._refused.items()}

    def origin(self, name: str) -> Origin:
        """Where the entry ``name`` came from (:class:`UnknownName` when there is none)."""
        self[name]
        return self._origins[name]

    def _origin(self, ep: Any) -> str:
        """``<what> plug-in 'name' = 'module:attr' (distribution D)`` (the package when no distribution is known)."""
        dist = getattr(getattr(ep, "dist", None), "name", None)
        origin = f"distribution {dist}" if dist else f"package {str(ep.value).partition(':')[0].strip() or '?'}"
        return f"{self.what} plug-in {ep.name!r} = {ep.value!r} ({origin})"

    def __getitem__(self, name: str) -> T:
        """The entry ``name``; :class:`UnknownName` (listing the registered names) when there is none."""
        self.load()
        try:
            return self._entries[name]
        except KeyError:
            if name in self._refused:
                raise UnknownName(self.refused()[name]) from None
            raise UnknownName(f"unknown {self.what} {name!r}; registered: {', '.join(sorted(self._entries)) or 'none'}") \
                from None

    def get(self, name: str, default: T | None = None) -> T | None:
        """The entry ``name``, or ``default``."""
        self.load()
        return self._entries.get(name, default)

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self.load()
        return len(self._entries)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        self.load()
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs, sorted by name."""
        self.load()
        return sorted(self._entries.items())

    def as_dict(self) -> dict[str, T]:
        """A copy of the entries as a dict."""
        self.load()
        return dict(self._entries)

    def snapshot(self) -> tuple[dict[str, T], bool, dict[str, Origin], dict[str, tuple[str, str]]]:
        """The registry's entries (built-ins loaded), whether plug-ins were loaded, the entries' origins and the
        refused plug-ins, for :meth:`restore`."""
        self._load_builtins()
        return dict(self._entries), self._plugins_loaded, dict(self._origins), dict(self._refused)

    def restore(self, state: tuple[dict[str, T], bool, dict[str, Origin], dict[str, tuple[str, str]]]) -> None:
        """Put back a state taken by :meth:`snapshot` (tests that install fake plug-ins use both)."""
        self._entries, self._plugins_loaded, self._origins = dict(state[0]), state[1], dict(state[2])
        self._refused = dict(state[3])

    def reload_plugins(self) -> None:
        """Forget that plug-ins were loaded (and refused): the next look-up loads the entry points again."""
        self._plugins_loaded = False
        self._refused = {}
