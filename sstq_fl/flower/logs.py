"""sstq-fl and Flower's ``flwr`` logger: what a ClientApp's log stream shows, and what a simulation hides.

A library logger has no handler and inherits the root's WARNING level, so in a ClientApp process
(``flwr run``, a SuperNode, a simulation's actor) the client ledger's INFO line would be dropped.
Flower logs through its ``flwr`` logger and its console handler, whose output ``flwr run`` streams
(`Flower logging <https://flower.ai/docs/framework/how-to-configure-logging.html>`_).
:func:`show_in_flower_log` gives the ``sstq_fl`` logger a handler that passes its records to that
logger, at INFO, unless logging is already configured (a handler on ``sstq_fl`` or on the root: the
user's own setup wins).  :class:`~sstq_fl.flower.LdpEncodeMod` calls it unless built with
``flower_log=False`` (the project's ClientApp in a quiet simulation).

Around a simulation the package starts (:func:`sstq_fl.flower.simulation.simulate`), two standard
``logging`` tools act on the ``flwr`` logger and are removed after: :func:`flower_logs_hidden` raises
its level to WARNING where asked (the command line's training commands, unless ``--verbose``), and
:class:`RunSimulationDeprecation`, a ``logging.Filter``, drops Flower's deprecation banner for
``run_simulation``.  Nothing rewrites a line Flower logs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

PACKAGE_LOGGER = "sstq_fl"
FLOWER_LOGGER = "flwr"
HANDLER = "sstq-fl.to-flower"
RUN_SIMULATION_DEPRECATION = "The `run_simulation` function is deprecated"


class ToFlower(logging.Handler):
    """Hands each record to Flower's ``flwr`` logger, when that logger shows the record's level."""

    def emit(self, record: logging.LogRecord) -> None:
        flower = logging.getLogger(FLOWER_LOGGER)
        if flower.isEnabledFor(record.levelno):
            flower.handle(record)


def show_in_flower_log() -> None:
    """Route ``sstq_fl`` records of INFO and above to Flower's log stream, once, unless logging is
    configured already (see the module's docstring)."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    if logger.hasHandlers():
        return
    handler = ToFlower()
    handler.set_name(HANDLER)
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


@contextlib.contextmanager
def flower_logs_hidden(hide: bool = True) -> Iterator[None]:
    """While the block runs (``hide``), Flower's own INFO and DEBUG records (per-round summaries, start-up
    banners) are not emitted, so sstq-fl's one progress line per round is what a simulation prints; WARNING and
    above (errors included) still show.  The ``flwr`` logger's level is raised to WARNING (its children
    inherit it; its own console handler and the root's handlers see nothing below) and restored after.
    Ray's driver logging is already at WARNING (Flower's default ``init_args.logging_level``) and the
    actors' output still reaches the driver (``log_to_driver``), so a client's traceback stays visible.
    Off, nothing changes, so a library caller or ``flwr run`` keeps Flower's normal logs."""
    flower = logging.getLogger(FLOWER_LOGGER)
    level = flower.level
    if hide:
        flower.setLevel(max(logging.WARNING, level))
    try:
        yield
    finally:
        flower.setLevel(level)


class RunSimulationDeprecation(logging.Filter):
    """Drops exactly Flower's deprecation banner for ``flwr.simulation.run_simulation`` (logged by
    ``flwr.simulation.run_simulation.run_simulation`` through ``warn_deprecated_feature``).

    A known deprecation we keep on purpose: ``run_simulation`` runs the simulation in this
    process (the engine's in-memory results, one Ray start for many runs) and attaches to an
    existing Ray cluster (``init_args.address``), which ``flwr run`` does not.  Every other
    record, deprecations included, passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        first = str(record.args[0]) if isinstance(record.args, tuple) and record.args else ""
        return not (str(record.msg).startswith("DEPRECATED FEATURE") and first.startswith(RUN_SIMULATION_DEPRECATION))


@contextlib.contextmanager
def without_run_simulation_deprecation() -> Iterator[None]:
    """Attach :class:`RunSimulationDeprecation` to Flower's logger for the duration."""
    flower, quiet = logging.getLogger(FLOWER_LOGGER), RunSimulationDeprecation()
    flower.addFilter(quiet)
    try:
        yield
    finally:
        flower.removeFilter(quiet)


def summary_level() -> int:
    """The level of a strategy's ``summary()`` lines: INFO where Flower's own INFO logs show (they join
    Flower's "Starting strategy" banner), DEBUG where :func:`flower_logs_hidden` hides that banner."""
    return logging.INFO if logging.getLogger(FLOWER_LOGGER).isEnabledFor(logging.INFO) else logging.DEBUG
