"""The sstq-fl command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from .argtypes import (
    DEVICE_HELP,
    device_arg,
    item_list,
    out_file,
    out_folder,
    plan_epsilon,
    positive_float,
    positive_int,
    positive_ints,
    powers_of_two,
    probability,
    redundancy,
    resource_amount,
    seed_int,
    unit_rate,
)
from .config.declare import add_arguments, from_args
from .console import print_json, run_and_exit
from .encoder_cli import encoders_parser
from .placement import placement_of
from .process import ProcessOptions, apply_process_options


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the text gives it or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        """The help template, with `` (default: %(default)s)`` appended where a default is worth showing."""
        text, default = action.help, action.default
        if not text or "default" in text or not action.option_strings or action.required:
            return text
        if default is None or default is False or default is argparse.SUPPRESS or default in ("", []):
            return text
        return text + " (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """A parser (and sub-parsers) showing every option's default in ``--help``; a bad command line is one line, exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``argparse.ArgumentParser`` with :class:`_HelpFormatter` unless another formatter is given."""
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        """``PROG: error: MESSAGE (see PROG --help)`` on stderr, one line, and exit 2."""
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def cmd_options(args: argparse.Namespace) -> int:
    """The options reference (markdown), generated from the configuration declarations; with ``--pyproject PATH``,
    rewrite that file's generated ``[tool.flwr.app.config]`` block instead."""
    from .config.catalog import options_reference, rewrite_pyproject

    if args.pyproject is None:
        sys.stdout.write(options_reference())
    else:
        changed = rewrite_pyproject(args.pyproject)
        print(f"{args.pyproject}: the run config {'rewritten' if changed else 'already matches the declarations'}")
    return 0


def cmd_mse(args: argparse.Namespace) -> int:
    from .bench.mse import run
    from .checks import check_array

    check_array(f"a chunk of 250 encodings at d = {max(args.dims)}", 250 * max(args.dims))
    res = run(args.dims, args.epsilon, args.bits, args.norm, args.trials, args.out, args.encoders or None)
    _table(res["rows"], ["encoder", "d", "mse", "ci_low", "ci_high", "mse_exact", "bits_per_message"])
    print(f"wrote {args.out} and {args.out.rsplit('.', 1)[0]}.png ({res['wall_s']:.1f} s)")
    return 0


def cmd_fwht(args: argparse.Namespace) -> int:
    from .bench.speed import fwht_speed
    from .checks import check_array

    check_array(f"the transform input ({args.rows} × {max(args.sizes)})", args.rows * max(args.sizes), 4)
    res = fwht_speed(args.rows, args.sizes, args.out, device=args.device)
    _table(res["rows"], ["kernel", "rows", "N", "s", "max_abs_diff_vs_first"])
    return 0


def cmd_kashin(args: argparse.Namespace) -> int:
    from .bench.speed import kashin_levels

    res = kashin_levels(args.dim, args.out, args.rho)
    _table(res["rows"], ["setting", "input", "achieved_level", "public_bound", "within_bound", "s_per_vector"])
    return 0


def cmd_kashin_search(args: argparse.Namespace) -> int:
    """The frame's worst Kashin level: adversarial search with dual certificates (issue 15)."""
    from .bench.kashin import kashin_search_report

    res = kashin_search_report(args.dims, args.out, args.rho, args.seed)
    for r in res["by_dim"]:
        print(f"d={r['d']}: worst level found {r['worst']['certified_lower_bound']:.4f} (certified lower bound); "
              f"default public level {r['default_linf_level']}")
    print(f"wrote {args.out} and its .png")
    return 0


def cmd_privacy_plan(args: argparse.Namespace) -> int:
    """LDP plan: per-message, basic, advanced and PLD totals (large ε answers ``inf`` or is refused)."""
    from .privacy.ldp import ldp_plan_report, plan_lines

    rep = ldp_plan_report(args.ldp_epsilon, args.rounds, args.delta, args.sampling_rate, shuffle=args.shuffle)
    if args.json:
        print_json(rep)
        return 0
    print("\n".join(plan_lines(rep)))
    return 0


def cmd_privacy_replay(args: argparse.Namespace) -> int:
    """Recompute epsilon from a transcript alone; exit 1 if it differs from the recorded one beyond the
    replay tolerance, 2 (one-line error) if the transcript, or its binding to ``--metrics``, is refused."""
    from .privacy.replay import check_metrics, read_metrics, replay

    out = replay(args.file, args.delta)
    if args.metrics is not None:
        check_metrics(read_metrics(args.metrics), args.file)
        out["metrics"] = args.metrics
    if args.json:
        print_json(out)
    else:
        verdict = ""
        if "recorded_epsilon" in out:
            verdict = f"; recorded {out['recorded_epsilon']:.6g}: " + \
                ("match" if out["matches_recorded"] else f"MISMATCH ({out['mismatch']})")
        bound = f"; bound to {args.metrics} (run {out['run_id']})" if args.metrics is not None else ""
        print(f"epsilon = {out['epsilon']:.6g} at delta = {out['delta']:g} ({out['relation']}, {out['events']} events)"
              f"{verdict}{bound}")
    return 0 if out.get("matches_recorded", True) else 1


def cmd_ledger(args: argparse.Namespace) -> int:
    from .bench.ledger import ledger_bench

    res = ledger_bench(args.out, args.steps)
    _table(res["subsampled_gaussian"], ["relation", "steps", "epsilon", "epsilon_rdp", "record_and_answer_s"])
    _table(res["pure_eps_references"], ["per_message", "rounds", "pld", "basic", "advanced"])
    return 0


def _run_config(args: argparse.Namespace, encoder: str) -> Any:
    """The checked :class:`~sstq_fl.config.train.RunConfig` of ``run`` / ``compare``, after probing ``--ray-address``
    (Ray itself retries an address that does not answer for minutes)."""
    from .checks import probe_ray
    from .config.declare import from_args
    from .config.train import RunConfig

    cfg = from_args(RunConfig, args, encoder=encoder)
    if args.ray_address:
        probe_ray(args.ray_address)
    return cfg


def _log_to(args: argparse.Namespace) -> str | None:
    """``--log-to`` (:class:`~sstq_fl.config.tracking.TrackingConfig`), checked by
    :func:`~sstq_fl.tracking.check_spec` (a bad spec or a missing package is one line)."""
    from .config.declare import from_args
    from .config.tracking import TrackingConfig
    from .tracking import check_spec

    return check_spec(from_args(TrackingConfig, args).log_to)


def cmd_compare(args: argparse.Namespace) -> int:
    """Several encoders on identical batches (every spec is checked before any training)."""
    from .config.train import COMPARE_ENCODERS
    from .experiments.compare import compare

    encoders = args.encoders or COMPARE_ENCODERS
    print(f"comparing {len(encoders)} encoders on {args.task} ({args.clients} clients, {args.rounds} rounds, "
          f"epsilon {args.epsilon}) -> {args.out}")
    compare(_run_config(args, encoders[0]), encoders, args.out, resume=args.resume, force=args.force,
            experiment=getattr(args, "experiment", None), keep_checkpoints=args.keep_checkpoints,
            interval=args.interval, log_to=_log_to(args), placement=placement_of(args))
    print(f"wrote {args.out}/comparison.md (table), {args.out}/comparison.png (curves, accuracy vs bits), "
          f"{args.out}/comparison.json and one folder per encoder")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The built-in default comparison: Fashion-MNIST, 100 clients, five encoders, Flower + Ray."""
    from .config.train import DEMO_ENCODERS, DEMO_PRESET, RunConfig
    from .experiments.compare import compare

    base = RunConfig(**{**DEMO_PRESET, "rounds": args.rounds, "engine": args.engine, "seed": args.seed,
                        "randomness": args.randomness})
    print(f"demo: Fashion-MNIST MLP, {base.clients} clients x {base.rounds} rounds, per-message epsilon {base.epsilon:g}, "
          f"clip {base.clip:g}, lr {base.lr:g}, engine {base.engine}; encoders {', '.join(DEMO_ENCODERS)} (a few minutes "
          f"on 2 cores)", flush=True)
    compare(base, DEMO_ENCODERS, args.out, resume=args.resume, force=args.force, placement=placement_of(args))
    print(f"wrote {args.out}/comparison.md, comparison.png and one folder per encoder (metrics, transcript, curves)")
    return 0


def _claim_out(cfg: Any, args: argparse.Namespace) -> None:
    """Check ``--out`` once the config is valid, before anything is written: ``--resume`` needs its
    checkpoint (same config) and says where it restarts; otherwise another run's files there are
    refused unless ``--force`` (which removes them)."""
    from .fl.checkpoint import finished_run, read_checkpoint
    from .fl.engine import existing_outputs
    from .io import clean_temps, clear_out, mark_kind, refuse_other_kind

    out = Path(args.out)
    refuse_other_kind(out, "run")
    clean_temps(out, everything=args.resume)
    if finished_run(out, cfg, args.resume) is not None:  # another config's completed run there: refused
        print(f"the run in {args.out} is complete ({cfg.rounds} rounds): nothing to resume", flush=True)
    elif args.resume:
        t = read_checkpoint(out, cfg)["round"]
        print(f"resuming from round {t} of {cfg.rounds} in {args.out}", flush=True)
    else:
        clear_out(existing_outputs(out), out, args.force)
        mark_kind(out, "run")


def _record_experiment(args: argparse.Namespace, cfg: Any) -> None:
    """With ``--config``: ``OUT/experiment.json`` records the file, its sha256 and the resolved config."""
    if getattr(args, "experiment", None) is None:
        return
    from .experiments.runner import CELL_FILE, cell_record
    from .experiments.spec import Cell
    from .io import atomic_write_json

    atomic_write_json(Path(args.out) / CELL_FILE, cell_record(Cell("run", {}, cfg), args.experiment.provenance()))


def cmd_run(args: argparse.Namespace) -> int:
    """One training run: the config, encoder, data and budget are checked before ``--out`` is touched."""
    from .experiments.runner import number
    from .fl.engine import METRIC_KEYS, run, trainers
    from .progress import progress

    cfg, log_to = _run_config(args, args.encoder), _log_to(args)
    trainer = trainers(cfg, [cfg.encoder])[cfg.encoder]  # checks the encoder, the data and the budget
    _claim_out(cfg, args)
    _record_experiment(args, cfg)
    with progress(cfg.rounds, f"{cfg.encoder} rounds", key="rounds", every=1):  # a bar on a terminal, else log lines
        m = run(cfg, args.out, resume=args.resume, trainer=trainer, keep_checkpoints=args.keep_checkpoints,
                log_to=log_to, placement=placement_of(args))
    f = m["final"]
    metric = next((f"{k.replace('_', ' ')} {number(f[k])}" for k in METRIC_KEYS if k in f), "no published metric")
    print(f"{cfg.encoder}: {metric}, train loss {number(f.get('train_loss'))} (non-private diagnostic), "
          f"{f['bits_per_client']} bits/client/round, randomness {cfg.randomness}, "
          f"epsilon {number(f['epsilon_total'])} at delta {f['delta']:g} ({f['wall_s']:.1f} s)"
          + (f"; central epsilon {number(f['epsilon_central']['epsilon'])} ({trainer.trusted.trusted})" if trainer.trusted
             else ""))
    print(f"wrote {args.out}/metrics.json, {args.out}/transcript.jsonl, {args.out}/curves.png")
    return 0


def _table(rows: list[dict[str, Any]], cols: list[str]) -> None:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    data = [[fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(d[i]) for d in data)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for d in data:
        print("  ".join(v.ljust(w) for v, w in zip(d, widths)))


def build_parser(gen: bool = True) -> argparse.ArgumentParser:
    """The ``sstq-fl`` parser: every option has a help text and ``--help`` shows its default.  ``gen=False``
    leaves out the DP pipelines' sub-commands (loading the pipelines takes most of a second)."""
    p = _Parser(prog="sstq-fl", description=__doc__, allow_abbrev=False)  # a sub-command's --n is no abbreviation
    add_arguments(p, ProcessOptions)
    sub = p.add_subparsers(dest="cmd", required=True)

    encoders_parser(sub)
    o = sub.add_parser("options", help="the options reference: every option's flag, run-config key, type, default, "
                                       "allowed values and help (markdown, as docs/options.md)")
    o.add_argument("--pyproject", type=Path, default=None, metavar="PATH",
                   help="rewrite the Flower app's run config ([tool.flwr.app.config], between its generated markers) "
                        "in this pyproject.toml from the declarations, instead of printing the reference")
    o.set_defaults(fn=cmd_options)

    b = sub.add_parser("bench", help="benchmarks (JSON + plots)")
    bs = b.add_subparsers(dest="bench", required=True)
    _mse_parser(bs)
    from .bench.parsers import add_bench_parsers

    _fwht_kashin_ledger_parsers(bs)
    add_bench_parsers(bs, _table)
    _training_parsers(sub)

    from .experiments.cli import add_experiment_parsers

    add_experiment_parsers(sub, _resume_force_args)

    from .gen.cli import add_gen_parsers

    add_gen_parsers(sub, pipelines=gen)

    _privacy_parsers(sub)
    return p


def _mse_parser(bs: Any) -> None:
    """``bench mse-vs-dim``."""
    m = bs.add_parser("mse-vs-dim", help="experiment E1: estimation error versus dimension")
    m.add_argument("--dims", type=positive_ints, default="100,500,1000,5000,10000",
                   help="comma-separated dimensions d")
    m.add_argument("--epsilon", type=positive_float, default=3.0, help="per-message LDP epsilon")
    m.add_argument("--bits", type=positive_int, default=8, help="bit width b for encoders that take one")
    m.add_argument("--clip", dest="norm", type=positive_float, default=0.2,
                   help="clip norm C: the encoders' radius, and the norm of the test vector")
    m.add_argument("--trials", type=positive_int, default=1000,
                   help="independent encodings per point (at least 2: the 95%% interval is a bootstrap percentile one)")
    m.add_argument("--encoders", type=item_list, default=None,
                   help="space- or ';'-separated encoder specs (default: the E1 set)")
    m.add_argument("--out", default="results/e1.json", type=out_file, help="result JSON (the plot goes next to it as .png)")
    m.set_defaults(fn=cmd_mse)


def _fwht_kashin_ledger_parsers(bs: Any) -> None:
    """``bench fwht``, ``bench kashin`` and ``bench ledger``."""
    f = bs.add_parser("fwht", help="time every available FWHT kernel")
    f.add_argument("--rows", type=positive_int, default=100, help="vectors transformed at once")
    f.add_argument("--sizes", type=powers_of_two, default="1024,16384,65536,262144",
                   help="comma-separated transform sizes N (powers of 2)")
    f.add_argument("--device", type=device_arg, default="auto", help=DEVICE_HELP)
    f.add_argument("--out", default="results/fwht.json", type=out_file, help="result JSON")
    f.set_defaults(fn=cmd_fwht)
    k = bs.add_parser("kashin", help="achieved Kashin level on adversarial inputs, per setting")
    k.add_argument("--dim", type=positive_int, default=25450, help="vector dimension")
    k.add_argument("--rho", type=redundancy, default=2.5, help="frame redundancy N/d")
    k.add_argument("--out", default="results/kashin.json", type=out_file, help="result JSON")
    k.set_defaults(fn=cmd_kashin)
    ks = bs.add_parser("kashin-search", help="the frame's worst Kashin level: adversarial search, dual certificates")
    ks.add_argument("--dims", type=positive_ints, default="100,25450", help="comma-separated dimensions d")
    ks.add_argument("--rho", type=redundancy, default=2.5, help="frame redundancy N/d")
    ks.add_argument("--seed", type=seed_int, default=0, help="public frame seed (the encoders' run seed)")
    ks.add_argument("--out", default="results/kashin_search.json", type=out_file, help="result JSON (the plot goes next to it)")
    ks.set_defaults(fn=cmd_kashin_search)
    lb = bs.add_parser("ledger", help="ledger speed (10k subsampled-Gaussian steps) and reference values")
    lb.add_argument("--steps", type=positive_int, default=10_000, help="subsampled-Gaussian steps recorded")
    lb.add_argument("--out", default="results/ledger.json", type=out_file, help="result JSON")
    lb.set_defaults(fn=cmd_ledger)


def _training_parsers(sub: Any) -> None:
    """``run``, ``compare`` and ``demo``."""
    from .config.declare import add_arguments
    from .config.train import COMPARE_ENCODERS, DEMO_PRESET, RunConfig
    from .experiments.cli import add_interval, add_verbose

    r = sub.add_parser("run", help="federated training with encoded gradients (writes DIR/metrics.json)")
    _training_args(r)
    r.set_defaults(fn=cmd_run)
    c = sub.add_parser("compare", help="several encoders on identical batches: curves, accuracy vs bits, table")
    c.add_argument("--encoders", type=item_list, default=None,
                   help=f"space- or ';'-separated specs (default: {' '.join(COMPARE_ENCODERS)})")
    _training_args(c, skip=("encoder",))
    add_interval(c)
    c.set_defaults(fn=cmd_compare)
    preset = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in DEMO_PRESET.items())
    dm = sub.add_parser("demo", help=f"the built-in default comparison of run's defaults with {preset}")
    dm.add_argument("--out", default="results/demo", type=out_folder, help="output folder (one sub-folder per encoder)")
    add_arguments(dm, RunConfig, only=("rounds", "seed", "engine", "randomness"), defaults=DEMO_PRESET)
    _resume_force_args(dm)
    add_verbose(dm)
    dm.set_defaults(fn=cmd_demo)


def _privacy_parsers(sub: Any) -> None:
    """``privacy plan`` and ``privacy replay``."""
    pv = sub.add_parser("privacy", help="privacy accounting: plans and transcript replay")
    ps = pv.add_subparsers(dest="privacy", required=True)
    pl = ps.add_parser("plan", help="LDP training: per-message, basic, advanced and PLD totals")
    pl.add_argument("--ldp-epsilon", type=plan_epsilon, required=True,
                    help="per-message epsilon, > 0 and at most 1e300 (the PLD accountant's range); a total beyond the "
                         "float range is reported as inf")
    pl.add_argument("--rounds", type=positive_int, required=True, help="rounds, at most 10**7")
    pl.add_argument("--sampling-rate", type=unit_rate, default=1.0,
                    help="probability q that a client joins a round (Poisson participation; 1: every round)")
    pl.add_argument("--delta", type=probability, default=1e-5, help="delta at which the totals are reported")
    pl.add_argument("--shuffle", type=positive_int, default=None, metavar="N",
                    help="also report the central epsilon with a trusted shuffler of N messages a round")
    pl.add_argument("--json", action="store_true", help="print the report as JSON")
    pl.set_defaults(fn=cmd_privacy_plan)
    rp = ps.add_parser("replay", help="recompute epsilon from a transcript alone (strict: malformed transcripts "
                                      "are refused with exit 2; a recomputed epsilon off the recorded one by more "
                                      "than a relative 1e-6 exits 1)")
    rp.add_argument("file", help="a run's transcript.jsonl (or, with --metrics, its transcript_central.jsonl)")
    rp.add_argument("--delta", type=probability, default=None, help="answer at this delta (default: the summary's)")
    rp.add_argument("--metrics", default=None, metavar="FILE",
                    help="the run's metrics.json: refuse unless its privacy_transcript binding (run id, sha256, "
                         "epsilon, delta) names this transcript and every privacy-bearing field (final, amplified and "
                         "central epsilon, delta, relation, rounds and each round's epsilon, per-message epsilon, "
                         "randomness, sampling rate, encoder, trust, threat model) agrees with the replay of the run's "
                         "transcripts (both, beside each other, for a run with a trust model; version 3 or later)")
    rp.add_argument("--json", action="store_true", help="print the result as JSON")
    rp.set_defaults(fn=cmd_privacy_replay)


def _resume_force_args(p: argparse.ArgumentParser) -> None:
    """``--resume`` / ``--force`` (one or the other) for commands that write a run folder."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true",
                   help="continue from the folder's last completed round (the checkpoint must be there, same config)")
    g.add_argument("--force", action="store_true",
                   help="start over in a folder that holds another run's files (they are removed first)")


def _training_args(r: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """Options shared by ``run`` and ``compare``: the fields of :class:`~sstq_fl.config.train.RunConfig`
    (declared there once), where the Flower engine runs, ``--config``, ``--log-to``
    (:class:`~sstq_fl.config.tracking.TrackingConfig`) and the output folder."""
    from .config.declare import add_arguments
    from .config.tracking import TrackingConfig
    from .config.train import RunConfig
    from .experiments.cli import add_config_option, add_keep_checkpoints, add_verbose

    add_arguments(r, RunConfig, skip=skip)
    add_arguments(r, TrackingConfig)
    r.add_argument("--ray-address", default=None, help="flower engine: attach to this Ray cluster (host:port)")
    r.add_argument("--client-cpus", type=resource_amount, default=None,
                   help="flower engine: CPUs Ray reserves for each simulated node's actor (default 0.5; 1 with cohort "
                        "nodes, which compute a batch)")
    r.add_argument("--client-gpus", type=resource_amount, default=None,
                   help="flower engine: GPUs Ray reserves for each simulated node's actor (default 0.25 where CUDA is "
                        "available, else 0; e.g. 1 to give each cohort node a GPU of its own)")
    _resume_force_args(r)
    add_keep_checkpoints(r)
    add_config_option(r)
    add_verbose(r)
    r.add_argument("--out", required=True, type=out_folder, help="output folder")


def _last_round(out: Path) -> int | None:
    """The round of the newest checkpoint in ``out`` or one of its sub-folders (None: there is none)."""
    found = [c for c in (out / "checkpoint.json", *out.glob("*/checkpoint.json")) if c.is_file()]
    try:
        return int(json.loads(max(found, key=lambda c: c.stat().st_mtime).read_text())["round"]) if found else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _interrupted(args: argparse.Namespace, exc: KeyboardInterrupt) -> str:
    """The one line printed on Ctrl-C: for training, the last checkpointed round and how to go on
    (a progress bar is gone by then: :func:`sstq_fl.progress.progress` removes it on the way out)."""
    if not hasattr(args, "resume"):
        return "interrupted"
    if getattr(args, "cmd", "") == "sweep":
        return "interrupted: rerun with --resume (finished cells are kept; started ones continue from their checkpoint)"
    t = getattr(exc, "round", None)
    t = _last_round(Path(args.out)) if t is None else t
    if t is None:
        return "interrupted before the first checkpoint: rerun without --resume"
    return f"interrupted after round {t}: rerun with --resume"


def process_options(argv: list[str]) -> ProcessOptions:
    """The process-wide options (:class:`~sstq_fl.process.ProcessOptions`) of a command line, read before the
    full parser is built (which may load PyTorch); the full parser checks them again, in their place."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_arguments(pre, ProcessOptions)
    return from_args(ProcessOptions, pre.parse_known_args(argv)[0])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    """Parse and run one command; errors are one line on stderr (exit 2), Ctrl-C one line (exit 130).
    The process-wide options are applied first, before PyTorch loads (:mod:`sstq_fl.process`); the ``sstq_fl``
    loggers' INFO lines (progress, phases) go to stderr (:func:`sstq_fl.progress.configure_logging`)."""
    from .errors import first_line
    from .progress import configure_logging

    given = sys.argv[1:] if argv is None else list(argv)
    apply_process_options(process_options(given))
    words = [a for a in given if not a.startswith("-")]
    parser = build_parser(gen=words[:1] == ["gen"])  # the pipelines load only for ``gen``
    args = parser.parse_args(argv)
    configure_logging()
    try:
        if getattr(args, "config", None):
            from .experiments.cli import apply_config

            args = apply_config(parser, args, argv)
        return int(args.fn(args) or 0)
    except BrokenPipeError:  # the reader went away (``sstq-fl encoders | head``): stop quietly, as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (ValueError, OSError) as exc:
        print(f"sstq-fl: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except MemoryError as exc:  # a size no up-front check bounded: still one line
        print(f"sstq-fl: error: out of memory ({first_line(exc) or 'an allocation failed'})", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(_interrupted(args, exc), file=sys.stderr)
        return 130


def _warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """A warning as one line on stderr, ``sstq-fl: warning: MESSAGE`` (no source line: it is the library's)."""
    print(f"sstq-fl: warning: {' '.join(str(message).split())}", file=sys.stderr if file is None else file)


def console_main() -> NoReturn:
    """The ``sstq-fl`` console script: :func:`main` with warnings as one line each, ended by
    :func:`sstq_fl.console.run_and_exit`."""
    import warnings

    warnings.showwarning = _warning_line
    run_and_exit(main)


if __name__ == "__main__":
    console_main()
