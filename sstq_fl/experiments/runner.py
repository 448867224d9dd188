"""Running a grid of cells: in this process one after another, or in parallel as Ray tasks.

Each cell is one training run into its own folder.  A cell whose folder holds the completed
``metrics.json`` of exactly its config is skipped (a resumed sweep reruns no finished cell); one
with a checkpoint continues from its last round; the rest start.  A failing cell is recorded
with its one-line error and the others go on.

On Ray (:class:`RayExecutor`) each cell is a task holding ``cpus`` CPUs, and PyTorch gets one
thread per CPU it holds; Ray reuses its worker processes, so a worker loads a data set once
for the cells it runs.  Cells on the Flower engine start a Flower simulation of their own, itself
on Ray, so they run in this process, one simulation for all of them.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..checks import require
from ..errors import described, first_line
from ..fl.engine import METRIC_KEYS
from ..io import atomic_write_json
from ..placement import Placement
from .spec import Cell

log = logging.getLogger("sstq_fl.sweep")
CELL_FILE = "experiment.json"


@dataclass
class CellResult:
    """How one cell ended: ``done`` (trained now), ``skipped`` (complete before), or ``failed`` (``error``)."""

    name: str
    status: str
    seconds: float = 0.0
    error: str = ""
    final: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The one line printed when the cell ends."""
        if self.status == "failed":
            return f"{self.name}: FAILED: {self.error}"
        f, what = self.final, "already complete" if self.status == "skipped" else f"{self.seconds:.1f} s"
        metric = next((f"{k.replace('_', ' ')} {number(f[k])}" for k in METRIC_KEYS if k in f), "")
        return f"{self.name}: {metric}, {f.get('bits_per_client')} bits/client ({what})"


def number(v: Any) -> str:
    """A number as text: 4 significant digits; ``None`` (a non-finite value stored as JSON null: an infinite ε,
    a diverged metric) as ``n/a``."""
    return f"{v:.4g}" if isinstance(v, int | float) else "n/a"


def one_line(exc: BaseException) -> str:
    """An exception as one line: the message (a ``ValueError``'s alone), else ``Type: message``."""
    text = first_line(exc)[:300]
    return text if isinstance(exc, ValueError) and text else described(exc)[:300]


_TASKS: dict[str, Any] = {}


def shared_task(cfg: Any) -> Any:
    """The cell's task, loaded once per process for every cell that builds the same one (same name,
    seed and task options: a data set is read once per worker)."""
    from ..fl.tasks import make_task

    key = json.dumps([cfg.task, cfg.seed, cfg.task_kwargs()], sort_keys=True, default=str)
    if key not in _TASKS:
        _TASKS.clear()  # one task kept: a worker runs cells of one task at a time
        _TASKS[key] = make_task(cfg.task, cfg.seed, **cfg.task_kwargs())
    return _TASKS[key]


def run_cell(cfg_json: str, folder: str, resume: bool, keep_checkpoints: bool, record: dict[str, Any],
             threads: int = 0, log_to: str | None = None) -> dict[str, Any]:
    """One cell, on the vectorized engine, into ``folder``: the unit of work a Ray task runs.

    ``threads`` > 0 sets PyTorch's thread count first; ``record`` (the experiment's provenance and
    the cell's values) is written to ``folder/experiment.json``; ``log_to``: the cell's published metrics
    also go to this tracker (:mod:`sstq_fl.tracking`), a tracker run named after the cell's folder.  Never
    raises for a failing cell: returns ``{"status": "failed", "error": ...}``."""
    import torch

    from ..config.train import RunConfig
    from ..fl.engine import Trainer

    if threads > 0:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        cfg = RunConfig(**json.loads(cfg_json))
        trainer = Trainer(cfg, task=shared_task(cfg), keep_checkpoints=keep_checkpoints)
        trainer.plot_curves = False  # the sweep draws its own figures from every cell
        trainer.log_to = log_to
        return train_cell(trainer, Path(folder), resume, record)
    except Exception as exc:  # noqa: BLE001  (a failing cell is reported; the sweep goes on)
        return {"status": "failed", "seconds": time.perf_counter() - t0, "error": one_line(exc)}


def train_cell(trainer: Any, out: Path, resume: bool, record: dict[str, Any]) -> dict[str, Any]:
    """Train (or resume, or skip when complete) one cell with its built trainer; its end as a dict."""
    from ..fl.checkpoint import finished_run

    t0 = time.perf_counter()
    done = finished_run(out, trainer.cfg, resume)  # a completed run of this config; refuses another config's
    if done is not None:
        return {"status": "skipped", "seconds": 0.0, "final": done["final"]}
    atomic_write_json(out / CELL_FILE, record)
    m = trainer.train(out, resume=resume and (out / "checkpoint.json").exists(), progress=False)
    return {"status": "done", "seconds": time.perf_counter() - t0, "final": m["final"]}


def cell_record(cell: Cell, provenance: dict[str, Any]) -> dict[str, Any]:
    """What a cell's folder records about where it came from: the experiment file, digest and its values."""
    return {"experiment": provenance, "cell": cell.name, **({"label": cell.label} if cell.label else {}),
            "values": cell.values, "config": asdict(cell.cfg)}


Report = Callable[[CellResult], None]


@dataclass
class LocalExecutor:
    """The cells one after another in this process, a bar (or log lines at ``round_level``) over each
    cell's rounds.  ``trainers``: already built ones by cell name (else built here, sharing one
    loaded task); ``raise_errors``: a failing cell raises instead of being reported."""

    trainers: dict[str, Any] = field(default_factory=dict)
    raise_errors: bool = False
    round_level: int = logging.INFO
    cores: int = 1  # one cell at a time (its PyTorch threads are PyTorch's default)
    log_to: str | None = None  # the tracker of the cells it builds (a built trainer has its own)

    def run(self, jobs: list[tuple[Cell, Path]], resume: bool, keep: bool, provenance: dict[str, Any],
            report: Report) -> None:
        from ..progress import progress

        for cell, folder in jobs:
            with progress(cell.cfg.rounds, f"{cell.cfg.encoder} rounds", key="rounds", level=self.round_level, every=1):
                got = self._one(cell, folder, resume, keep, provenance)
            report(CellResult(cell.name, **got))

    def _one(self, cell: Cell, folder: Path, resume: bool, keep: bool, provenance: dict[str, Any]) -> dict[str, Any]:
        if cell.name not in self.trainers:
            got = run_cell(json.dumps(asdict(cell.cfg)), str(folder), resume, keep, cell_record(cell, provenance),
                           log_to=self.log_to)
            if got["status"] == "failed" and self.raise_errors:
                raise ValueError(got["error"])
            return got
        return train_cell(self.trainers[cell.name], folder, resume, cell_record(cell, provenance))


@dataclass
class RayExecutor:
    """The cells as Ray tasks, ``cpus`` CPUs each, on a local Ray (``address`` None) or a cluster; ``log_to``:
    each cell's tracker."""

    cpus: float = 1.0
    address: str | None = None
    cores: int = field(default=0)
    log_to: str | None = None

    def run(self, jobs: list[tuple[Cell, Path]], resume: bool, keep: bool, provenance: dict[str, Any],
            report: Report) -> None:
        saved_print = builtins.print  # ray.init installs its own print in builtins and shutdown leaves it there
        ray = self._start()
        try:
            task = ray.remote(num_cpus=self.cpus, max_retries=0)(run_cell)
            threads = max(1, int(self.cpus))
            pending = {task.remote(json.dumps(asdict(c.cfg)), str(f), resume, keep, cell_record(c, provenance),
                                   threads, self.log_to): c for c, f in jobs}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    report(self._result(ray, ref, pending.pop(ref)))
        finally:
            ray.shutdown()
            builtins.print = saved_print

    def _start(self) -> Any:
        """Start (or attach to) Ray, quietly, with this process's import path for its workers (their runtime
        environment; this process's own environment is left as it is)."""
        require("ray", "--executor ray (--executor local runs without it)")
        import ray

        paths = [p for p in [os.getcwd(), *sys.path] if p and os.path.isdir(p)]
        workers = {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}}  # they import what this process can
        kw: dict[str, Any] = {"address": self.address} if self.address else {"num_cpus": os.cpu_count() or 1}
        ray.init(include_dashboard=False, logging_level=logging.WARNING, configure_logging=True, runtime_env=workers, **kw)
        self.cores = int(ray.cluster_resources().get("CPU", 1))
        return ray

    @staticmethod
    def _result(ray: Any, ref: Any, cell: Cell) -> CellResult:
        try:
            return CellResult(cell.name, **ray.get(ref))
        except Exception as exc:  # noqa: BLE001  (a worker that died: the cell failed, the sweep goes on)
            return CellResult(cell.name, "failed", error=one_line(exc))


def run_flower_cells(jobs: list[tuple[Cell, Path]], resume: bool, keep: bool, provenance: dict[str, Any],
                     report: Report, raise_errors: bool = False, log_to: str | None = None,
                     placement: Placement | None = None) -> None:
    """Cells on the Flower engine: in this process, one Flower simulation (one Ray start) per group of
    cells with the same federation (clients, clients per node); each cell reported as it ends.  A
    simulation that fails fails the group's unfinished cells (``raise_errors``: raises instead); ``log_to``:
    each cell's tracker; ``placement``: where the simulations run (:class:`~sstq_fl.placement.Placement`)."""
    groups: dict[tuple[int, int], list[tuple[Cell, Path]]] = {}
    for cell, folder in jobs:
        groups.setdefault((cell.cfg.clients, cell.cfg.clients_per_node), []).append((cell, folder))
    finished: set[str] = set()

    def seen(r: CellResult) -> None:
        finished.add(r.name)
        report(r)

    for group in groups.values():
        try:
            _flower_group(group, resume, keep, provenance, seen, log_to, placement or Placement())
        except Exception as exc:  # noqa: BLE001  (the simulation failed: its unfinished cells did)
            if raise_errors:
                raise
            for cell, _ in group:
                if cell.name not in finished:
                    report(CellResult(cell.name, "failed", error=one_line(exc)))


def _flower_group(group: list[tuple[Cell, Path]], resume: bool, keep: bool, provenance: dict[str, Any],
                  report: Report, log_to: str | None, placement: Placement) -> None:
    """One Flower simulation for ``group``'s cells, one after another."""
    from ..backends import backend  # Flower stays at the edges: found by entry point

    for cell, folder in group:
        atomic_write_json(folder / CELL_FILE, cell_record(cell, provenance))
    clock = [time.perf_counter()]

    def ended(i: int, m: dict[str, Any]) -> None:
        now = time.perf_counter()
        seconds, clock[0] = now - clock[0], now
        report(CellResult(group[i][0].name, "done", seconds, final=m["final"]))

    runs = [(c.cfg, f, resume and (f / "checkpoint.json").exists()) for c, f in group]
    tracking: dict[str, Any] = {"log_to": log_to} if log_to else {}
    backend("flower-train-many")(runs, on_result=ended, keep_checkpoints=keep, **tracking, **placement.backend_kwargs())


def pending_jobs(jobs: Iterable[tuple[Cell, Path]], report: Report) -> list[tuple[Cell, Path]]:
    """The jobs whose folder does not already hold their completed run (those are reported skipped)."""
    from ..fl.checkpoint import completed_metrics

    todo = []
    for cell, folder in jobs:
        done = completed_metrics(folder, cell.cfg)
        if done is None:
            todo.append((cell, folder))
        else:
            report(CellResult(cell.name, "skipped", final=done["final"]))
    return todo
