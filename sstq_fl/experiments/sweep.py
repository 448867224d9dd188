"""``sstq-fl sweep``: every cell of an experiment's grid, then the tables and figures.

Layout of ``DIR``: ``cells/<cell>/`` (each a run folder: ``metrics.json``, ``transcript.jsonl``,
``curves.png``, ``experiment.json``), ``sweep.json`` (the experiment's file, digest and title, each
cell's status and seconds, wall time, cores and parallel efficiency
``Σ cell seconds / (wall seconds × cores)``), ``results.csv``/``.json``, ``aggregates.csv``,
``final.csv``, ``trust.csv``/``.md`` (:mod:`sstq_fl.experiments.results`) and the figures
(:mod:`sstq_fl.experiments.figures`).  ``resume`` reruns only the cells without a completed run.
"""

from __future__ import annotations

import csv
import gzip
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io import KIND_FILE, atomic_write_json, clean_temps, mark_kind, no_duplicate_keys, refuse_other_kind, run_meta
from ..placement import Placement
from .figures import FIGURES, plot_all
from .preflight import preflight
from .results import aggregate, checked_results, final_rows, write_tables
from .runner import CellResult, LocalExecutor, RayExecutor, pending_jobs, run_flower_cells
from .spec import Cell, Experiment
from .sweep_limits import MAX_CELLS, check_grid

log = logging.getLogger("sstq_fl.sweep")
SWEEP_FILES = ("sweep.json", "results.csv", "results.csv.gz", "results.json", "aggregates.csv", "final.csv", "trust.csv",
               "trust.md", *(f"{name}.{fmt}" for name in FIGURES for fmt in ("png", "pdf")))


@dataclass
class SweepOptions:
    """How a sweep runs: ``executor`` ``ray`` (default) or ``local``; CPUs per cell; where Ray is; the interval over
    seeds its tables hold and its figures draw (None: the experiment file's ``[experiment] interval``, else ``t95``);
    the tracker each cell's published metrics also go to (``log_to``, :mod:`sstq_fl.tracking`); whether the Flower
    engine's cells hide Flower's INFO logs (``quiet_flower``: the command line does, unless ``--verbose``)."""

    executor: str = "ray"
    cpus: float = 1.0
    ray_address: str | None = None
    resume: bool = False
    force: bool = False
    keep_checkpoints: bool = False
    max_cells: int = MAX_CELLS
    interval: str | None = None
    log_to: str | None = None
    quiet_flower: bool = False


def claim(out: Path, opts: SweepOptions) -> None:
    """Check ``out`` before anything runs: ``resume`` needs a sweep there; otherwise a folder holding
    a sweep is refused unless ``force`` (which removes its cells and tables).  A sweep stopped before its
    first cell (its folder marked, nothing else) resumes from the first cell."""
    refuse_other_kind(out, "sweep")
    held = (out / "sweep.json").exists() or (out / "cells").exists()
    if opts.resume and not held and not (out / KIND_FILE).is_file():
        raise ValueError(f"--resume: no sweep in {out} (nothing to resume; run without --resume)")
    if held and not opts.resume:
        if not opts.force:
            raise ValueError(f"{out} already holds a sweep: --resume runs its missing cells, --force starts over")
        shutil.rmtree(out / "cells", ignore_errors=True)
        for name in SWEEP_FILES:
            (out / name).unlink(missing_ok=True)
    if not opts.resume:
        mark_kind(out, "sweep")


def sweep(exp: Experiment, out: str | Path, opts: SweepOptions | None = None, **overrides: Any) -> dict[str, Any]:
    """Run ``exp``'s grid (``overrides``: command-line values) into ``out``; return ``sweep.json``'s content.

    The grid's size, every cell's config (:func:`~sstq_fl.experiments.preflight.preflight`) and ``out`` are
    checked before anything is written; then stale temporary files are removed and this session is
    recorded in ``sweep.json`` before the first cell runs."""
    opts, out = opts or SweepOptions(), Path(out)
    check_grid(exp.path, [axes for _, axes in exp.shapes(overrides)], opts.max_cells, bool(exp.exclusions))
    cells = exp.cells(**overrides)
    preflight(cells, exp.path)
    claim(out, opts)
    clean_temps(out, everything=opts.resume)
    jobs = [(c, out / "cells" / c.name) for c in cells]
    header = {"experiment": exp.provenance(), "fixed": exp.fixed, "axes": exp.axes, "task_params": exp.task_params,
              **exp.grid_record(), "overrides": overrides, "interval": opts.interval or exp.interval or "t95"}
    session = start_session(out, header, cells, opts)
    log.info("sweep %s: %d cells -> %s (%s)", exp.title, len(cells), out, _how(opts))
    results, t0, cores = run_jobs(jobs, exp.provenance(), opts)
    summary = write_summary(out, header, cells, results, time.perf_counter() - t0, cores, session)
    doc = write_tables(out, cells, [f for _, f in jobs], header)
    summary["figures"] = [str(p.relative_to(out)) for p in plot_all(doc, out)]
    return summary


def _how(opts: SweepOptions) -> str:
    if opts.executor == "local":
        return "one cell at a time in this process"
    return f"Ray tasks of {opts.cpus:g} CPU each" + (f" on {opts.ray_address}" if opts.ray_address else ", local Ray")


def run_jobs(jobs: list[tuple[Cell, Path]], provenance: dict[str, Any], opts: SweepOptions
             ) -> tuple[dict[str, CellResult], float, int]:
    """Run the jobs (finished ones skipped), one live bar over the cells to run and a line per finished
    cell; return the cells' ends, the start time of the first cell run and the cores they ran on."""
    from ..progress import progress

    results: dict[str, CellResult] = {}

    def skipped(r: CellResult) -> None:
        results[r.name] = r
        log.info("%s", r.line())

    todo = pending_jobs(jobs, skipped)
    t0 = time.perf_counter()
    executor = LocalExecutor(round_level=logging.DEBUG, log_to=opts.log_to) if opts.executor == "local" else \
        RayExecutor(opts.cpus, opts.ray_address, log_to=opts.log_to)
    local = [j for j in todo if j[0].cfg.engine != "flower"]
    flower = [j for j in todo if j[0].cfg.engine == "flower"]
    with progress(len(todo), "cells", key="cells", every=len(todo) + 1, level=logging.DEBUG) as bar:
        def report(r: CellResult) -> None:
            results[r.name] = r
            bar.advance(last=r.name)
            log.log(logging.WARNING if r.status == "failed" else logging.INFO, "%s | %s", bar.head(),
                    r.line())

        if local:
            executor.run(local, opts.resume, opts.keep_checkpoints, provenance, report)
        if flower:
            run_flower_cells(flower, opts.resume, opts.keep_checkpoints, provenance, report, log_to=opts.log_to,
                             placement=Placement(quiet_flower=opts.quiet_flower))
    return results, t0, (executor.cores or 1) if local else 1


def start_session(out: Path, header: dict[str, Any], cells: list[Cell], opts: SweepOptions) -> dict[str, Any]:
    """Record this session in ``sweep.json`` (status ``running``) before any cell runs, appended to the
    sessions already there (a resume keeps every earlier one, killed or not); return its entry."""
    before = _previous(out) if opts.resume else {}
    session = {"id": f"{os.getpid()}-{time.time_ns()}", "status": "running", "executor": opts.executor,
               "cpus_per_cell": opts.cpus, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    cells_now = before.get("cells") or [{**_entry(c), "status": "not run"} for c in cells]
    atomic_write_json(out / "sweep.json", {**before, **header, "cells": cells_now,
                                           "sessions": [*before.get("sessions", []), session]})
    return session


def write_summary(out: Path, header: dict[str, Any], cells: list[Cell], results: dict[str, CellResult], wall: float,
                  cores: int, session: dict[str, Any]) -> dict[str, Any]:
    """``sweep.json``: the experiment (``header``: its provenance, values and the command line's overrides),
    each cell's end (a cell skipped now keeps the seconds of the session that ran it), and one entry per
    session (every one recorded at its start; this one completed now): wall time, cores, parallel efficiency."""
    before = _previous(out)
    ran = [r for r in results.values() if r.status == "done"]
    busy = sum(r.seconds for r in ran)
    session = {**session, "status": "completed", "wall_s": wall, "cores": cores,
               "counts": {s: sum(1 for r in results.values() if r.status == s) for s in ("done", "skipped", "failed")},
               "cell_seconds": busy, "parallel_efficiency": busy / (wall * cores) if ran and wall > 0 else None,
               "meta": {**run_meta(), "cpu_count": os.cpu_count()}}
    earlier = {c["name"]: c for c in before.get("cells", [])}
    sessions = [s for s in before.get("sessions", []) if s.get("id") != session["id"]]
    summary = {**header, **{k: session[k] for k in ("counts", "wall_s", "cores", "parallel_efficiency")},
               "cells": [{**_entry(c), **_end(results.get(c.name), earlier.get(c.name))}
                         for c in cells],
               "sessions": [*sessions, session]}
    atomic_write_json(out / "sweep.json", summary)
    return summary


def _entry(c: Cell) -> dict[str, Any]:
    """A cell as ``sweep.json`` names it: its folder, its values and its ``[[cell]]`` table's name (when it has one)."""
    return {"name": c.name, "values": c.values, **({"label": c.label} if c.label else {})}


def _previous(out: Path) -> dict[str, Any]:
    """The ``sweep.json`` a resumed sweep continues (empty when there is none or it is unreadable)."""
    try:
        return dict(json.loads((out / "sweep.json").read_text()))
    except (OSError, ValueError):
        return {}


def _end(r: CellResult | None, earlier: dict[str, Any] | None) -> dict[str, Any]:
    """A cell's entry: how it ended now; a skipped one keeps the session that ran it's seconds."""
    if r is None:
        return {"status": "not run"}
    if r.status == "skipped" and earlier and earlier.get("seconds"):
        return {"status": "skipped", "seconds": earlier["seconds"]}
    return {"status": r.status, "seconds": r.seconds, **({"error": r.error} if r.error else {})}


def read_results(out: str | Path) -> dict[str, Any]:
    """A sweep's results: its ``results.json``, else its tidy table ``results.csv`` or ``results.csv.gz``
    (the aggregates recomputed; the experiment from ``sweep.json``); one-line error when there is none."""
    out = Path(out)
    path = out / "results.json"
    try:
        return checked_results(json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_duplicate_keys))
    except FileNotFoundError:
        pass
    except RecursionError:
        raise ValueError(f"{path} is nested past the JSON parser's recursion limit") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not a sweep's results ({str(exc).splitlines()[0]})") from None
    rows = read_table(out)
    aggs = aggregate(rows)
    try:
        exp = json.loads((out / "sweep.json").read_text()).get("experiment", {})
    except (OSError, ValueError):
        exp = {}
    return {"experiment": exp, "rows": rows, "aggregates": aggs, "final": final_rows(aggs)}


def read_table(out: Path) -> list[dict[str, Any]]:
    """The rows of ``results.csv`` (or ``results.csv.gz``), numbers as numbers, empty cells as None."""
    for name, opener in (("results.csv", open), ("results.csv.gz", gzip.open)):
        if (out / name).is_file():
            with opener(out / name, "rt", newline="") as fh:  # type: ignore[operator]
                return [{k: _typed(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    raise ValueError(f"{out} holds no sweep results (results.json or results.csv): run sstq-fl sweep first")


def _typed(text: str) -> Any:
    """A CSV cell as int, float, None (empty) or the text itself."""
    if text == "":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text
