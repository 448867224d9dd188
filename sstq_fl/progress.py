"""Logging and progress for long loops (rounds, generator steps, trials, sweeps).

:func:`configure_logging` gives the ``sstq_fl`` logger one handler (rich on a terminal, plain lines
on stderr otherwise); the command line calls it once, and so should any other entry point (the
Flower apps) whose ``sstq_fl.*`` lines should be seen.  :func:`progress` shows a rich progress bar
when stderr is a terminal and otherwise logs a line every ~10 % of the loop and at its end, so a
run whose output goes to a file (CI, ``flwr run``) still shows how far it got.  :func:`report` is
for a loop whose body is out of the caller's reach (a training round): it moves the innermost open
:func:`progress` opened with the same ``key``, or logs a line when there is none.  The time left is one
estimate (:func:`eta_seconds`, written by :func:`eta_text`), shown alike by the bar and the log line.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Column

LOGGER = "sstq_fl"
HANDLER = "sstq_fl"  # the name of the handler configure_logging attaches (so it is attached once)
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_T = TypeVar("_T")
log = logging.getLogger(LOGGER)

_lock = threading.RLock()
_open: list[Progress] = []  # module-wide, not per thread: a Flower ServerApp thread reports into the caller's bar
_live: RichProgress | None = None
_console: Console | None = None


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes to whatever ``sys.stderr`` is when a line is emitted (pytest's
    capture, a redirected stream), not to the stream that was current when it was created."""

    def __init__(self) -> None:
        """A handler on ``sys.stderr``, resolved at each line."""
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        """The current ``sys.stderr``."""
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        """Ignored: the stream is always the current ``sys.stderr``."""


def on_terminal() -> bool:
    """Whether stderr is an interactive terminal (bars and rich log lines) rather than a file or pipe."""
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):  # no stderr, or a closed one
        return False


def console() -> Console:
    """The one rich console on stderr shared by the log handler and the progress bars (so log lines
    are printed above a live bar instead of through it)."""
    global _console
    if _console is None:
        _console = Console(stderr=True)
    return _console


def configure_logging(level: int | str = "INFO") -> logging.Logger:
    """Give the ``sstq_fl`` logger one handler and set its level; return the logger.

    On a terminal the handler is a rich :class:`~rich.logging.RichHandler`, otherwise plain
    ``time LEVEL logger: message`` lines on stderr.  Idempotent: a second call only sets the level
    (the handler is never duplicated).  The root logger and Flower's ``flwr`` logger are left alone;
    ``sstq_fl`` records still propagate to the root (so pytest's ``caplog`` sees them)."""
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level)
    if not any(h.get_name() == HANDLER for h in logger.handlers):
        handler: logging.Handler
        if on_terminal():
            handler = RichHandler(console=console(), show_path=False, log_time_format="[%X]")
        else:
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter(FORMAT, "%H:%M:%S"))
        handler.set_name(HANDLER)
        logger.addHandler(handler)
    return logger


def format_fields(fields: dict[str, Any]) -> str:
    """``k v`` pairs joined by commas; floats to 4 significant digits, an infinite one as ``inf``."""
    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k.replace('_', ' ')} {fmt(v)}" for k, v in fields.items() if v is not None)


def eta_seconds(elapsed: float, completed: int, total: int) -> float | None:
    """The time left of a loop, at the mean pace so far: ``elapsed / completed · (total − completed)`` (None before
    the first step or after the last).  The one estimate the bar and the log line show."""
    if not 0 < completed < total:
        return None
    return elapsed / completed * (total - completed)


def eta_text(seconds: float | None) -> str:
    """``eta h:mm:ss`` (rounded to the second), ``eta -:--:--`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "eta -:--:--"
    s = round(seconds)
    return f"eta {s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def default_every(total: int) -> int:
    """Log interval of a loop with ``total`` steps when not on a terminal: about every 10 %."""
    return max(1, math.ceil(total / 10))


class Progress:
    """One loop's progress: a task of the shared rich bar on a terminal, else log lines at intervals.

    Made by :func:`progress`; :meth:`advance` or :meth:`update` move it, with optional
    ``fields`` (e.g. ``loss=0.3``) shown next to the bar or in the log line."""

    def __init__(self, total: int, description: str, key: str, every: int, level: int, bar: RichProgress | None) -> None:
        """A loop of ``total`` steps; ``bar``: the shared rich bar (None: log lines every ``every`` steps at ``level``)."""
        self.total, self.description, self.key, self.every, self.level = total, description, key, every, level
        self.completed, self.t0, self._last_logged = 0, time.perf_counter(), 0
        self.fields: dict[str, Any] = {}
        self.eta: float | None = None  # the time left as of the last update (eta_seconds)
        self._bar = bar
        self._task = bar.add_task(description, total=total, info="", eta=eta_text(None)) if bar is not None else None

    def advance(self, n: int = 1, **fields: Any) -> None:
        """``n`` more steps are done (``fields``: the latest values to show)."""
        self.update(self.completed + n, **fields)

    def update(self, completed: int, **fields: Any) -> None:
        """``completed`` steps are done (absolute, e.g. a resumed run's round); ``fields`` as in :meth:`advance`."""
        self.completed, self.fields = completed, fields or self.fields
        self.eta = eta_seconds(time.perf_counter() - self.t0, completed, self.total)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=completed, info=format_fields(self.fields), eta=eta_text(self.eta))
        elif completed // self.every > self._last_logged // self.every or completed >= self.total:
            if completed != self._last_logged:
                self._log()

    def head(self) -> str:
        """``description completed/total (pct %, elapsed, eta h:mm:ss)``: the eta the bar shows (:attr:`eta`)."""
        elapsed = time.perf_counter() - self.t0
        pct = 100 * self.completed / self.total if self.total else 100.0
        eta = f", {eta_text(self.eta)}" if self.eta is not None else ""
        return f"{self.description} {self.completed}/{self.total} ({pct:.0f} %, {elapsed:.1f} s{eta})"

    def line(self) -> str:
        """:meth:`head` and ``: fields``."""
        extra = format_fields(self.fields)
        return self.head() + (f": {extra}" if extra else "")

    def _log(self) -> None:
        """Log the current line and remember where it was logged."""
        self._last_logged = self.completed
        log.log(self.level, "%s", self.line())

    def close(self) -> None:
        """Take the task off the bar (on a terminal the finished bar vanishes) and log the last line if it was not."""
        if self._bar is not None and self._task is not None:
            self._bar.remove_task(self._task)
            self._task = None
        if self.completed and self.completed != self._last_logged:
            self._log()


def _start_bar(terminal: bool) -> RichProgress | None:
    """The shared rich bar (started on first use) when drawing on a terminal, else None."""
    global _live
    if not terminal:
        return None
    if _live is None:
        info = TextColumn("{task.fields[info]}", table_column=Column(no_wrap=False))
        _live = RichProgress(TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.fields[eta]}"), info, console=console(),
                             transient=True)
        _live.start()
    return _live


def _stop_bar() -> None:
    """Stop the shared rich bar once no progress is open."""
    global _live
    if _live is not None and not any(p._bar is not None for p in _open):
        _live.stop()
        _live = None


@contextmanager
def progress(total: int, description: str, *, key: str = "", every: int | None = None, level: int = logging.INFO,
             terminal: bool | None = None) -> Iterator[Progress]:
    """A progress bar for ``total`` steps while the block runs (nested ones share one rich display).

    On a terminal (``terminal``: default, whether stderr is one) a rich bar; otherwise a log line
    every ``every`` steps (default ~10 %, :func:`default_every`) and at the end, at ``level``
    (``logging.DEBUG`` for an inner loop whose lines would drown the outer one's).  ``key`` names
    the loop for :func:`report` (default: ``description``)."""
    with _lock:
        p = Progress(total, description, key or description, every or default_every(total), level,
                     _start_bar(on_terminal() if terminal is None else terminal))
        _open.append(p)
    try:
        yield p
    finally:
        with _lock:
            _open.remove(p)
            p.close()
            _stop_bar()


def report(key: str, completed: int, total: int, *, label: str = "", **fields: Any) -> None:
    """Step ``completed`` of ``total`` of a loop named ``key``, from inside it: moves the innermost open
    :func:`progress` with that key (which decides between bar and log lines), else logs one line
    ``label key completed/total: fields`` at INFO."""
    with _lock:
        p = next((q for q in reversed(_open) if q.key == key), None)
    if p is not None:
        p.update(completed, **fields)
        return
    extra = format_fields(fields)
    log.info("%s %d/%d%s", f"{label} {key}".strip(), completed, total, f": {extra}" if extra else "")


class PhaseClock:
    """Wall seconds per named phase of a pipeline run (reported in its ``metrics.json``), each phase's
    start and duration logged: ``clock("release", fn)`` runs ``fn`` and returns its result."""

    def __init__(self, pipeline: str, logger: str = "sstq_fl.gen") -> None:
        self.pipeline, self.log = pipeline, logging.getLogger(logger)
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn: Callable[[], _T]) -> _T:
        self.log.info("%s: %s ...", self.pipeline, name.replace("_", " "))
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.seconds[name] = round(time.perf_counter() - t0, 3)
            self.log.info("%s: %s took %.1f s", self.pipeline, name.replace("_", " "), self.seconds[name])
