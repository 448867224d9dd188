"""The tracking option, declared once: ``--log-to`` on ``sstq-fl run``, ``compare`` and ``sweep``, and the
Flower run-config key ``log-to`` (:mod:`sstq_fl.options`).  Where a run is logged is not part of what it
computes, so it lives here and not in :class:`~sstq_fl.fl.config.RunConfig` (whose fields every run records
and a resume compares)."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import Options, option
from .base import check_spec

LOG_TO_HELP = ("also log each round's published metrics (the model metric, losses, epsilon, bits per client) and the "
               "run's config to an experiment tracker: tensorboard:DIR (an event folder per run, DIR/RUN) or "
               "mlflow:URI (a tracking URI such as file:///tmp/mlruns or sqlite:///mlflow.db, or a folder: MLflow's "
               "file store); compare and sweep log one tracker run per encoder or cell, named after its folder.  "
               "Needs pip install 'sstq-fl[tracking]'")


@dataclass(frozen=True)
class TrackingConfig(Options):
    """Where a training run's published metrics are also logged (``None``: nowhere but its folder)."""

    log_to: str | None = option(None, unset="", metavar="SPEC", help=LOG_TO_HELP)

    def __post_init__(self) -> None:
        """A bad spec or a missing package is refused here, before anything runs (:func:`~.base.parse_spec`)."""
        super().__post_init__()
        check_spec(self.log_to)
