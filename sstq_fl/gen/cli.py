"""``sstq-fl gen <pipeline>``: one sub-command per registered DP generative pipeline, its options generated from
the pipeline's config class (:func:`sstq_fl.config.declare.add_arguments`: the declarations say which flags are
required and the words the CLI takes), plus the output folder.

A count's range is checked by the config rather than by argparse, so that every bad value is the same one-line
``sstq-fl: error: …`` (exit 2) before the output folder is touched.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..argtypes import out_folder
from ..checks import torch_device
from ..config.declare import add_arguments, from_args
from .pipelines import PIPELINES


def add_gen_parsers(sub: Any, pipelines: bool = True) -> None:
    """``gen`` and one sub-command per registered pipeline under ``sub`` (the top-level sub-parsers);
    ``pipelines=False`` adds ``gen`` alone, without loading the pipelines (for a command that is not ``gen``)."""
    g = sub.add_parser("gen", help="DP generative pipelines on simulated clients")
    if not pipelines:
        return
    gs = g.add_subparsers(dest="gen", required=True)
    for name, pipeline in PIPELINES.items():
        p = gs.add_parser(name, help=pipeline.help)
        add_arguments(p, pipeline.config, int_ranges=False)
        p.add_argument("--out", required=True, type=out_folder,
                       help="output folder (metrics.json, samples.png, transcript.jsonl)")
        p.add_argument("--force", action="store_true",
                       help="replace the run files (metrics.json, transcript.jsonl, samples.png) already in --out")
        p.set_defaults(fn=cmd_gen)


def gen_config(args: argparse.Namespace) -> Any:
    """The checked config of ``gen <pipeline>``'s parsed arguments (a ``ValueError`` names a bad value)."""
    return from_args(PIPELINES[args.gen].config, args)


def cmd_gen(args: argparse.Namespace) -> int:
    """``gen <pipeline>``: one run (the config is checked before ``--out`` is touched); prints the pipeline's
    summary lines, the randomness warning of a reproducible run and the files written."""
    pipeline = PIPELINES[args.gen]
    cfg = gen_config(args)
    torch_device(cfg.device)  # a local simulation: the device must be here
    preflight(cfg)
    m = pipeline.run(cfg, args.out, force=args.force)
    print(pipeline.summary(m))
    if "randomness_warning" in m:
        print(f"warning: {m['randomness_warning']}", file=sys.stderr)
    print(f"wrote {args.out}/metrics.json, {args.out}/samples.png, {args.out}/transcript.jsonl and "
          f"{args.out}/private_diagnostics.json (reads private records: not DP, do not publish)")
    return 0


def preflight(cfg: Any) -> None:
    """What can be refused before any data is read or any epsilon spent: a data-set ledger path that is not a
    file, an unreadable Inception weights file, a run whose own epsilon is over the data set's budget (the
    cumulative epsilon after it is at least its own), an expected batch above the records asked for."""
    from pathlib import Path

    ledger = getattr(cfg, "dataset_ledger", "")
    if ledger and Path(ledger).exists() and not Path(ledger).is_file():
        raise ValueError(f"--dataset-ledger {ledger} is not a file")
    weights = getattr(cfg, "inception_weights", "")
    if weights:
        from .evaluation import read_inception_state

        if not Path(weights).expanduser().is_file():
            raise ValueError(f"--inception-weights {weights}: no such file (nothing is downloaded)")
        read_inception_state(Path(weights).expanduser())
    budget = getattr(cfg, "dataset_budget_epsilon", None)
    if budget is not None and cfg.epsilon > budget:
        raise ValueError(f"this run alone spends epsilon {cfg.epsilon:g}, over the data set's budget {budget:g}")
    records, batch = getattr(cfg, "records", 0), getattr(cfg, "batch", None)
    if records and isinstance(batch, int) and batch > records:
        raise ValueError(f"--batch {batch} is above the {records} records asked for (the sampling rate B/N would "
                         f"exceed 1)")
