"""The experiment commands: ``sstq-fl sweep FILE --out DIR``, ``sstq-fl plot DIR``, and ``--config FILE``
for ``run`` and ``compare`` (the file's values become the command's defaults: options given on the
command line override them)."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from ..argtypes import out_folder, positive_int
from .sweep_limits import MAX_CELLS


def add_experiment_parsers(sub: Any, resume_force: Any) -> None:
    """``sweep`` and ``plot`` (``resume_force``: adds the shared ``--resume`` / ``--force`` pair)."""
    s = sub.add_parser("sweep", help="run an experiment file's grid (lists of values) in parallel: tables with 95%% "
                                     "intervals over seeds, plots")
    s.add_argument("experiment", help="experiment TOML file: sstq-fl run's options as keys, any of them a list")
    s.add_argument("--out", required=True, type=out_folder,
                   help="output folder (cells/, results.csv, aggregates.csv, plots)")
    s.add_argument("--max-cells", type=positive_int, default=None, metavar="N",
                   help=f"refuse a grid of more than N cells (default {MAX_CELLS:,}: a larger grid is refused unless "
                        f"this option allows it)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a key of the file (a TOML value; repeatable), e.g. --set rounds=5")
    s.add_argument("--executor", choices=("ray", "local"), default="ray",
                   help="ray: each cell a Ray task (parallel); local: one cell at a time in this process")
    s.add_argument("--cpus-per-cell", type=float, default=1.0,
                   help="CPUs each cell's Ray task holds (PyTorch gets one thread per CPU)")
    s.add_argument("--ray-address", default=None, help="attach to this Ray cluster (host:port) instead of a local Ray")
    add_tracking(s)
    add_keep_checkpoints(s)
    add_verbose(s)
    add_interval(s)
    resume_force(s)
    s.set_defaults(fn=cmd_sweep)
    p = sub.add_parser("plot", help="redraw a sweep's or comparison's figures from its results.json")
    p.add_argument("dir", help="the folder sstq-fl sweep (or compare) wrote")
    add_interval(p)
    p.set_defaults(fn=cmd_plot)


def add_interval(p: argparse.ArgumentParser) -> None:
    """``--interval t95|se|none`` (:class:`~sstq_fl.config.intervals.IntervalOptions`), unset unless given (the help says
    what is used then)."""
    from ..config.declare import add_arguments
    from ..config.intervals import IntervalOptions

    add_arguments(p, IntervalOptions, defaults={"interval": None})


def add_tracking(p: argparse.ArgumentParser) -> None:
    """``--log-to SPEC`` (:class:`~sstq_fl.config.tracking.TrackingConfig`)."""
    from ..config.declare import add_arguments
    from ..config.tracking import TrackingConfig

    add_arguments(p, TrackingConfig)


def add_verbose(p: argparse.ArgumentParser) -> None:
    """``--verbose``: the Flower engine's own INFO logs, which a training command otherwise hides."""
    p.add_argument("--verbose", action="store_true",
                   help="flower engine: show Flower's own INFO logs (per-round summaries); by default only its "
                        "warnings and errors, and one progress line per round")


def add_keep_checkpoints(p: argparse.ArgumentParser) -> None:
    """``--keep-checkpoints``: leave a completed run's checkpoint files (removed by default)."""
    p.add_argument("--keep-checkpoints", action="store_true",
                   help="keep each completed run's checkpoint files (by default they are removed when a run completes)")


def add_config_option(p: argparse.ArgumentParser) -> None:
    """``--config FILE`` on ``run`` / ``compare``."""
    p.add_argument("--config", default=None, metavar="FILE",
                   help="experiment TOML file whose values are this command's defaults (options given here override "
                        "them); one value per key (lists: sstq-fl sweep), except compare's encoder list")
    p.set_defaults(config_parser=p)


def parse_overrides(items: list[str], path: str) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as checked field values (each VALUE a TOML value; a bare word a string;
    ``task_params`` a TOML inline table).  Refused in one line: a newline or control character, an
    option set twice (under either spelling), the ``[experiment]``, ``[[cell]]`` and ``[[exclude]]`` tables, an
    unknown key."""
    from .spec import key_name, parse_experiment, task_params_value

    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for item in items:
        if any(ord(c) < 32 and c != "\t" for c in item):
            raise ValueError(f"--set {item!r}: one KEY=VALUE per --set (no newlines or control characters)")
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        if key.split(".")[0].strip("\"' ") == "experiment":
            raise ValueError(f"--set {key}: the [experiment] table (title, description) is the file's own, not settable")
        if key.split(".")[0].strip("\"' ") in ("cell", "exclude"):
            raise ValueError(f"--set {key}: the [[cell]] and [[exclude]] tables are the file's own, not settable (a --set "
                             f"value applies to every cell)")
        exp = parse_experiment(f"{key} = {_toml_value(value.strip())}".encode(), f"--set {key}")
        for name, v in {**task_params_value(exp.task_params, f"--set {key}"), **exp.fixed, **exp.axes}.items():
            if name in out:
                raise ValueError(f"--set {given[name]} and --set {key} are one option ({key_name(name)}): give it once")
            out[name], given[name] = v, key
    return out


def _toml_value(text: str) -> str:
    """``text`` as a TOML value: itself where it parses, else a quoted string."""
    try:
        tomllib.loads(f"v = {text}")
        return text
    except RecursionError:
        return text  # refused as nested too deep when the item is read
    except tomllib.TOMLDecodeError:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run the grid; exit 1 when a cell failed (each failure was reported in one line)."""
    from .spec import load_experiment
    from .sweep import SweepOptions, sweep

    if not args.cpus_per_cell > 0:
        raise ValueError(f"--cpus-per-cell must be positive, got {args.cpus_per_cell}")
    if args.ray_address is not None and args.executor == "ray":
        from ..checks import probe_ray

        probe_ray(args.ray_address)
    from ..config.declare import from_args
    from ..config.tracking import TrackingConfig
    from ..tracking import check_spec

    log_to = check_spec(from_args(TrackingConfig, args).log_to)  # a bad spec or a missing package: one line, before anything
    exp = load_experiment(args.experiment)
    overrides = parse_overrides(args.overrides, args.experiment)
    opts = SweepOptions(args.executor, args.cpus_per_cell, args.ray_address, args.resume, args.force,
                        args.keep_checkpoints, args.max_cells or MAX_CELLS, args.interval, log_to,
                        quiet_flower=not args.verbose)
    s = sweep(exp, args.out, opts, **overrides)
    c, eff = s["counts"], s["parallel_efficiency"]
    print(f"sweep {exp.title}: {c['done']} cells run, {c['skipped']} already complete, {c['failed']} failed, "
          f"{s['wall_s']:.1f} s wall on {s['cores']:g} cores"
          + (f", parallel efficiency {eff:.2f}" if eff is not None else ""))
    print(f"wrote {args.out}/results.csv, aggregates.csv, final.csv, trust.md, results.json, sweep.json and "
          f"{', '.join(Path(f).stem for f in s['figures'][::2])} figures (.png, .pdf)")
    return 1 if c["failed"] else 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Redraw a sweep's figures from its ``results.json``."""
    from .figures import plot_all
    from .sweep import read_results

    files = plot_all(read_results(args.dir), Path(args.dir), args.interval)
    if not files:
        raise ValueError(f"{args.dir}/results.json has no rows to plot")
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def apply_config(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None
                 ) -> argparse.Namespace:
    """With ``--config FILE``: the file's values become the command's defaults and the command line is
    parsed again (so what it gives overrides the file); records the file on ``args.experiment``."""
    from .spec import load_experiment, single_values

    exp = load_experiment(args.config)
    compare = hasattr(args, "encoders")
    values = single_values(exp, allow_lists=("encoder",) if compare else ())
    defaults = _defaults(values, compare)
    args.config_parser.set_defaults(**defaults)
    again = parser.parse_args(argv)
    again.experiment = exp
    return again


def _defaults(values: dict[str, Any], compare: bool) -> dict[str, Any]:
    """Parser defaults (by dest: the field names) from the file's values; compare's ``encoder`` key fills
    ``--encoders``."""
    out = dict(values)
    if compare and "encoder" in out:
        enc = out.pop("encoder")
        out["encoders"] = enc if isinstance(enc, list) else [enc]
    return out
