"""``--log-to tensorboard:DIR``: one event folder per run, ``DIR/<run name>``, written with PyTorch's
``torch.utils.tensorboard.SummaryWriter`` (the ``tensorboard`` package is imported when a run opens it).

The run's parameters go to TensorBoard's HParams dashboard (the session-start summary of
``torch.utils.tensorboard.summary.hparams``), each round's metrics are scalars at the round's step, and the final
metrics are scalars ``final/<name>`` at the last step, declared as the experiment's metrics with a session-end
summary.  A folder that already holds a run's events (the same run logged again, or resumed) is opened with
``purge_step`` at the first step logged, so TensorBoard hides the older events from that step on
(https://pytorch.org/docs/stable/tensorboard.html).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import TRACKERS, Tracker


@TRACKERS.register("tensorboard")
class TensorBoardTracker(Tracker):
    """Scalars and hyper-parameters in a TensorBoard event folder per run."""

    package = "tensorboard"

    def __init__(self, location: str):
        super().__init__(location)
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self._writer_cls: Any = SummaryWriter
        self.writer: Any = None
        self.params: dict[str, Any] = {}
        self.last_step = 0

    def start(self, run_name: str, params: Mapping[str, Any]) -> None:
        folder = Path(self.location).expanduser() / run_name
        logged_before = folder.is_dir() and any(folder.glob("events.out.tfevents.*"))
        self.writer = self._writer_cls(str(folder), purge_step=0 if logged_before else None)
        self.params = {k: str(v) if isinstance(v, bool) else v for k, v in params.items()}
        self._write_hparams({}, end=False)

    def log_round(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        self.last_step = step

    def finish(self, final: Mapping[str, float] | None) -> None:
        if final is not None:
            tags = {f"final/{name}": value for name, value in final.items()}
            for tag, value in tags.items():
                self.writer.add_scalar(tag, value, self.last_step)
            self._write_hparams(tags, end=True)
        self.writer.close()

    def _write_hparams(self, metrics: Mapping[str, float], end: bool) -> None:
        """The HParams experiment (its metrics: ``metrics``' tags), the session start (at the start) or end."""
        from torch.utils.tensorboard.summary import hparams

        experiment, start, stop = hparams(self.params, dict(metrics))
        for summary in (experiment, stop if end else start):
            self.writer.file_writer.add_summary(summary)
