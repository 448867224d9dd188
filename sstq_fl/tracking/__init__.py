"""Optional experiment trackers: a training run's published metrics and config, also logged to TensorBoard or
MLflow (``--log-to tensorboard:DIR`` / ``--log-to mlflow:URI``).  Neither package is imported until a run opens
its back end."""

from .base import TRACKERS, GuardedTracker, NullTracker, Tracker, check_spec, open_tracker, parse_spec
from .published import final_metrics, round_metrics, run_params

__all__ = ["TRACKERS", "GuardedTracker", "NullTracker", "Tracker", "check_spec", "final_metrics",
           "open_tracker", "parse_spec", "round_metrics", "run_params"]
