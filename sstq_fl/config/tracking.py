"""The tracking option, declared once: ``--log-to`` on ``sstq-fl run``, ``compare`` and ``sweep``, and the
Flower run-config key ``log-to`` (:mod:`sstq_fl.config.declare`).  Where a run is logged is not part of what it
computes, so it lives here and not in :class:`~sstq_fl.config.train.RunConfig` (whose fields every run records
and a resume compares).  Its spec is checked against the tracker registry where it is read
(:func:`sstq_fl.tracking.check_spec`: a bad spec or a missing package is one line, before anything runs)."""

from __future__ import annotations

from dataclasses import dataclass

from .declare import Options, option

LOG_TO_HELP = ("also log each round's published metrics (the model metric, losses, epsilon, bits per client) and the "
               "run's config to an experiment tracker: tensorboard:DIR (an event folder per run, DIR/RUN) or "
               "mlflow:URI (a tracking URI such as file:///tmp/mlruns or sqlite:///mlflow.db, or a folder: MLflow's "
               "file store); compare and sweep log one tracker run per encoder or cell, named after its folder.  "
               "Needs pip install 'sstq-fl[tracking]'")


@dataclass(frozen=True)
class TrackingConfig(Options):
    """Where a training run's published metrics are also logged (``None``: nowhere but its folder)."""

    log_to: str | None = option(None, unset="", metavar="SPEC", help=LOG_TO_HELP)
