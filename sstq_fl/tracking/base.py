"""The tracker interface, its registry of back ends and the ``--log-to SCHEME:LOCATION`` spec.

A back end is a :class:`Tracker` subclass registered under its scheme (``tensorboard``, ``mlflow``) in
:data:`TRACKERS`; it names the package it needs (:attr:`Tracker.package`), which is imported only when a
run opens that back end (:func:`open_tracker`), never when the spec is checked (:func:`check_spec`).  Other
distributions add back ends through the entry-point group ``sstq_fl.trackers``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from ..errors import described, first_line
from ..registry import Registry

log = logging.getLogger("sstq_fl.tracking")

INSTALL_HINT = "pip install 'sstq-fl[tracking]'"


class Tracker(ABC):
    """One run's log in an experiment tracker: its parameters, a row of metrics per round, the final metrics.

    ``location`` is the spec's part after the scheme (``tensorboard:DIR`` → ``DIR``)."""

    package: str = ""
    """The importable package the back end needs (checked with :func:`importlib.util.find_spec`)."""

    def __init__(self, location: str):
        self.location = location

    @abstractmethod
    def start(self, run_name: str, params: Mapping[str, Any]) -> None:
        """Open the run ``run_name`` and record its parameters (``bool``/``int``/``float``/``str`` values)."""

    @abstractmethod
    def log_round(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record round ``step``'s metrics."""

    @abstractmethod
    def finish(self, final: Mapping[str, float] | None) -> None:
        """Record the final metrics and close the run; ``None``: the run stopped before it completed."""


class NullTracker(Tracker):
    """No tracker (no ``--log-to``): every call does nothing."""

    def __init__(self, location: str = ""):
        super().__init__(location)

    def start(self, run_name: str, params: Mapping[str, Any]) -> None:
        return None

    def log_round(self, step: int, metrics: Mapping[str, float]) -> None:
        return None

    def finish(self, final: Mapping[str, float] | None) -> None:
        return None


def _is_tracker(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, Tracker)


TRACKERS: Registry[type[Tracker]] = Registry(
    "experiment tracker", builtins=("sstq_fl.tracking.tensorboard_backend", "sstq_fl.tracking.mlflow_backend"),
    group="sstq_fl.trackers", accepts=_is_tracker, kind="a Tracker subclass")
"""The tracker back ends by scheme: ``tensorboard`` and ``mlflow`` built in, plug-ins by entry point."""


def parse_spec(spec: str) -> tuple[type[Tracker], str]:
    """``SCHEME:LOCATION`` as ``(back end, location)``; a one-line ``ValueError`` for a spec without a scheme or
    a location, an unknown scheme, or a back end whose package is not installed (nothing is imported)."""
    scheme, sep, location = spec.partition(":")
    known = ", ".join(TRACKERS.names())
    if not sep or not scheme:
        raise ValueError(f"--log-to {spec}: expected SCHEME:LOCATION, e.g. tensorboard:runs/tb or "
                         f"mlflow:file:///tmp/mlruns (schemes: {known})")
    if scheme not in TRACKERS:
        raise ValueError(f"--log-to {spec}: unknown tracker {scheme!r} (known: {known})")
    if not location.strip():
        raise ValueError(f"--log-to {spec}: no location after {scheme}: (e.g. {scheme}:runs/{scheme})")
    cls = TRACKERS[scheme]
    if cls.package and importlib.util.find_spec(cls.package) is None:
        raise ValueError(f"--log-to {spec}: the {cls.package} package is not installed; {INSTALL_HINT}")
    return cls, location


def check_spec(spec: str | None) -> str | None:
    """``spec``, checked: a bad ``--log-to`` spec is refused in one line (see :func:`parse_spec`); ``None`` is no
    tracker."""
    if spec is not None:
        parse_spec(spec)
    return spec


def open_tracker(spec: str | None) -> Tracker:
    """The tracker of ``spec`` (``None``: a :class:`NullTracker`), its package imported now; guarded so that a
    failure after it started only stops the logging (:class:`GuardedTracker`), never the run."""
    if spec is None:
        return NullTracker()
    cls, location = parse_spec(spec)
    try:
        return GuardedTracker(spec, cls(location))
    except ImportError as exc:
        raise ValueError(f"--log-to {spec}: importing {cls.package} failed ({described(exc)}); {INSTALL_HINT}") \
            from None
    except Exception as exc:  # noqa: BLE001  (a location the back end cannot open: one line)
        raise ValueError(f"--log-to {spec}: {first_line(exc) or type(exc).__name__}") from None


class GuardedTracker(Tracker):
    """A tracker whose start failing is a one-line ``ValueError`` and whose later failures (a full disk, a
    tracking server gone) are one warning, after which nothing more is logged: logging never changes a run."""

    def __init__(self, spec: str, inner: Tracker):
        super().__init__(inner.location)
        self.spec, self.inner, self.broken = spec, inner, False

    def start(self, run_name: str, params: Mapping[str, Any]) -> None:
        try:
            self.inner.start(run_name, params)
        except Exception as exc:  # noqa: BLE001  (any back end's failure: one line)
            raise ValueError(f"--log-to {self.spec}: could not start the run {run_name!r} "
                             f"({first_line(exc) or type(exc).__name__})") from None

    def log_round(self, step: int, metrics: Mapping[str, float]) -> None:
        self._guarded(self.inner.log_round, step, metrics)

    def finish(self, final: Mapping[str, float] | None) -> None:
        if self.broken:  # nothing more is logged; the back end still releases what it holds
            with contextlib.suppress(Exception):
                self.inner.finish(None)
            return
        self._guarded(self.inner.finish, final)

    def _guarded(self, call: Any, *args: Any) -> None:
        if self.broken:
            return
        try:
            call(*args)
        except Exception as exc:  # noqa: BLE001  (the run goes on; the tracker stops)
            self.broken = True
            log.warning("--log-to %s: logging stopped (%s); the run goes on", self.spec, described(exc))
