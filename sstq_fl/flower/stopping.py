"""Stopping a Flower simulation with one Ctrl-C: the first SIGINT sets an event (:func:`stop_on_sigint`) and the
ServerApp's grid (:class:`StoppableGrid`) raises :class:`Interrupted` from its next call, so the simulation ends
within seconds instead of after the round timeout."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid


class Interrupted(Exception):
    """Raised by :class:`StoppableGrid` in the ServerApp's thread once a stop was asked for.

    An ``Exception``, not a ``KeyboardInterrupt``: Flower's ServerApp thread catches exceptions,
    sets the Simulation Runtime's stop event (its workers, Ray actors and Ray shut down) and
    re-raises the exception in the thread that called ``run_simulation``, without a traceback."""


class StoppableGrid(Grid):
    """A ``Grid`` that raises :class:`Interrupted` from its next call once ``stop`` is set.

    Every call goes to ``grid``; ``send_and_receive`` is re-implemented on top of
    ``push_messages``/``pull_messages`` (as Flower's grids do) so that a round waiting for
    replies notices the stop within one pull interval instead of waiting for the round timeout.
    The strategy checkpoints only after a round's replies are in, so stopping here never leaves
    a half-written round."""

    def __init__(self, grid: Grid, stop: threading.Event, pull_interval: float = 0.1):
        self._grid, self._stop, self.pull_interval = grid, stop, pull_interval

    def _check(self) -> None:
        if self._stop.is_set():
            raise Interrupted("stopped by SIGINT")

    def set_run(self, run: Any) -> None:
        self._grid.set_run(run)

    @property
    def run(self) -> Any:
        return self._grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        self._check()
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        self._check()
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        self._check()
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push ``messages`` and pull their replies until all are in or ``timeout`` passed (as Flower's grids)."""
        ids = set(self.push_messages(messages))
        end, out = time.time() + (timeout or 0.0), []
        while ids and (timeout is None or time.time() < end):
            got = list(self.pull_messages(ids))
            out += got
            ids -= {m.metadata.reply_to_message_id for m in got}
            if ids:
                time.sleep(self.pull_interval)
        return out


@contextlib.contextmanager
def stop_on_sigint(stop: threading.Event) -> Iterator[None]:
    """While the simulation runs, the first SIGINT sets ``stop`` instead of raising ``KeyboardInterrupt`` in
    the main thread: there it broke Flower's thread-pool join with a traceback, and the process then
    waited for the ServerApp thread, still waiting for replies (up to the 600 s round timeout), until
    a second Ctrl-C.  A second SIGINT gets the previous handler.  Outside the main thread (where no
    handler can be installed) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

