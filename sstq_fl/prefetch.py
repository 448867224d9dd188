"""Imports a run needs only at its end, loaded in a background thread while it trains.

A short run spends a fixed second or more at its end importing what writes its results: dp-accounting
(the transcript summary's RDP cross-check, :mod:`sstq_fl.privacy.rdp`) and matplotlib (``curves.png``,
:mod:`sstq_fl.plots`).  :func:`prefetch` starts those imports in one daemon thread when a run starts,
so they overlap its data loading and rounds; Python's per-module import locks make a later
``import`` in the main thread wait for the module, never load it twice.  ``SSTQ_FL_PREFETCH=0``
turns it off (every import then happens where it is used, as without this module).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading

__all__ = ["END_OF_RUN", "prefetch"]

END_OF_RUN = ("dp_accounting", "sstq_fl.plots")
"""What a run imports after its last round: the accountant of the summary's cross-check, the plots."""

log = logging.getLogger(__name__)
_STARTED: dict[tuple[str, ...], threading.Thread] = {}
_LOCK = threading.Lock()


def _load(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001  the import where it is used reports the error
            log.debug("prefetch of %s failed: %s", name, exc)


def prefetch(modules: tuple[str, ...] = END_OF_RUN) -> threading.Thread | None:
    """Start importing ``modules`` in a daemon thread, once per process and tuple; the thread (or
    ``None`` when ``SSTQ_FL_PREFETCH=0``).  A module already imported costs nothing."""
    if os.environ.get("SSTQ_FL_PREFETCH", "1") == "0":
        return None
    with _LOCK:
        thread = _STARTED.get(modules)
        if thread is None:
            thread = threading.Thread(target=_load, args=(modules,), name="sstq-fl-prefetch", daemon=True)
            _STARTED[modules] = thread
            thread.start()
    return thread
