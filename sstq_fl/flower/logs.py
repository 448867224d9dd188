"""sstq-fl's INFO lines in a ClientApp's log stream, next to Flower's own.

A library logger has no handler and inherits the root's WARNING level, so in a ClientApp process
(``flwr run``, a SuperNode, a simulation's actor) the client ledger's INFO line would be dropped.
Flower logs through its ``flwr`` logger and its console handler, whose output ``flwr run`` streams
(`Flower logging <https://flower.ai/docs/framework/how-to-configure-logging.html>`_).
:func:`show_in_flower_log` gives the ``sstq_fl`` logger a handler that passes its records to that
logger, at INFO, unless logging is already configured (a handler on ``sstq_fl`` or on the root: the
user's own setup wins) or the command line hides Flower's INFO logs (``$SSTQ_FL_QUIET_FLOWER``).
"""

from __future__ import annotations

import logging
import os

from ..progress import QUIET_FLOWER_ENV

PACKAGE_LOGGER = "sstq_fl"
HANDLER = "sstq-fl.to-flower"


class ToFlower(logging.Handler):
    """Hands each record to Flower's ``flwr`` logger, when that logger shows the record's level."""

    def emit(self, record: logging.LogRecord) -> None:
        flower = logging.getLogger("flwr")
        if flower.isEnabledFor(record.levelno):
            flower.handle(record)


def show_in_flower_log() -> None:
    """Route ``sstq_fl`` records of INFO and above to Flower's log stream, once, unless logging is
    configured already or Flower's INFO logs are hidden (see the module's docstring)."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    if logger.hasHandlers() or os.environ.get(QUIET_FLOWER_ENV, "0") not in ("", "0"):
        return
    handler = ToFlower()
    handler.set_name(HANDLER)
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
