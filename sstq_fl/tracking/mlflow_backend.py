"""``--log-to mlflow:URI``: one MLflow run per training run, through ``mlflow.tracking.MlflowClient`` (the
``mlflow`` package, e.g. ``mlflow-skinny``, is imported when a run opens it).

``URI`` is an MLflow tracking URI (``file:///tmp/mlruns``, ``sqlite:///mlflow.db``, ``http://host:5000``) or a
plain folder, taken as the file store there.  MLflow 3 keeps its file store in maintenance mode and refuses it
unless ``MLFLOW_ALLOW_FILE_STORE=true``: that opt-in is the user's (set in their environment), and a file-store spec
without it is refused in one line (https://mlflow.org/docs/latest/self-hosting/migrate-from-file-store).  The runs
go to the experiment ``$MLFLOW_EXPERIMENT_NAME`` (MLflow's own variable), else ``sstq-fl``; parameters are logged as strings
(values past MLflow's 6000-character limit cut with ``…``), metrics at the round's step, the final metrics as
``final/<name>``, and the run ends ``FINISHED`` (or ``KILLED`` when it stopped before completing).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import TRACKERS, Tracker

EXPERIMENT = "sstq-fl"
MAX_PARAM = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
BATCH = 100  # mlflow.utils.validation.MAX_PARAMS_TAGS_PER_BATCH


def tracking_uri(location: str) -> str:
    """``location`` as a tracking URI: a URI as it is, a plain folder as the ``file:`` URI of its absolute path."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", location):  # a scheme of two letters or more (not a drive letter)
        return location
    return Path(location).expanduser().resolve().as_uri()


@TRACKERS.register("mlflow")
class MlflowTracker(Tracker):
    """Parameters and metrics of one MLflow run per training run."""

    package = "mlflow"

    def __init__(self, location: str):
        super().__init__(location)
        self.uri = tracking_uri(location)
        from mlflow.entities import Metric, Param
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
        from mlflow.tracking import MlflowClient

        if self.uri.startswith("file:") and not MLFLOW_ALLOW_FILE_STORE.get():
            raise ValueError("MLflow 3 opens a file store only with MLFLOW_ALLOW_FILE_STORE=true in the environment: "
                             "set it, or log to sqlite:///mlflow.db or a tracking server")

        self.client: Any = MlflowClient(tracking_uri=self.uri)
        self._metric, self._param = Metric, Param
        self.run_id = ""
        self.last_step = 0

    def start(self, run_name: str, params: Mapping[str, Any]) -> None:
        run = self.client.create_run(self._experiment(), run_name=run_name)
        self.run_id = run.info.run_id
        items = [self._param(k, _cut(str(v))) for k, v in params.items()]
        for i in range(0, len(items), BATCH):
            self.client.log_batch(self.run_id, params=items[i:i + BATCH])

    def _experiment(self) -> str:
        """The experiment's id, created if it does not exist (another process may create it meanwhile)."""
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        found = self.client.get_experiment_by_name(name)
        if found is None:
            try:
                return str(self.client.create_experiment(name))
            except Exception:  # noqa: BLE001  (created by a parallel sweep cell: read it back)
                found = self.client.get_experiment_by_name(name)
                if found is None:
                    raise
        return str(found.experiment_id)

    def log_round(self, step: int, metrics: Mapping[str, float]) -> None:
        self._log(metrics, step)
        self.last_step = step

    def finish(self, final: Mapping[str, float] | None) -> None:
        if final is not None:
            self._log({f"final/{k}": v for k, v in final.items()}, self.last_step)
        self.client.set_terminated(self.run_id, "FINISHED" if final is not None else "KILLED")

    def _log(self, metrics: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        if metrics:
            self.client.log_batch(self.run_id, metrics=[self._metric(k, float(v), now, step) for k, v in metrics.items()])


def _cut(text: str) -> str:
    """``text`` within MLflow's parameter length."""
    return text if len(text) <= MAX_PARAM else text[:MAX_PARAM - 1] + "…"
