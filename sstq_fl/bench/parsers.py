"""The parsers of ``sstq-fl bench round-cost`` and ``bench shuffle``: built with every ``sstq-fl`` command,
so the benchmarks' modules (torch, the shuffle accountant) load only when their command runs."""

from __future__ import annotations

import argparse
from typing import Any


def add_shuffle_parser(bs: Any, table: Any) -> None:
    """``bench shuffle`` (``table(rows, cols)`` prints a result table)."""
    from ..argtypes import positive_int, probability

    def cmd(args: argparse.Namespace) -> int:
        from .shuffle import shuffle_report

        res = shuffle_report(args.out, args.delta, args.rounds, args.sweep, args.sweep_messages, args.reference)
        table(res["per_round"], ["epsilon0", "messages", "stronger_clone", "fmt21_numerical", "fmt21_closed_form"])
        table(res["rounds"], ["epsilon0", "messages", "rounds", "local", "central"])
        print(f"wrote {args.out} and its .png")
        return 0

    p = bs.add_parser("shuffle", help="central epsilon of shuffled LDP messages: bounds per round, over training, E3")
    p.add_argument("--delta", type=probability, default=1e-5, help="delta at which epsilon is reported")
    p.add_argument("--rounds", type=positive_int, default=100, help="rounds of full participation")
    p.add_argument("--sweep", default=None, help="an E3 epsilon sweep's final.csv: accuracy against both epsilons")
    p.add_argument("--sweep-messages", type=positive_int, default=100, help="clients per round of that sweep")
    p.add_argument("--reference", default=None, help="the central-DP reference's final.csv (a trust = \"curator\" sweep)")
    p.add_argument("--out", default="results/shuffle.json", help="result JSON (the plot goes next to it)")
    p.set_defaults(fn=cmd)


def add_round_cost_parser(bs: Any, table: Any) -> None:
    """``bench round-cost`` (``table(rows, cols)`` prints a result table)."""
    from ..argtypes import device_arg, positive_int

    def cmd(args: Any) -> int:
        from .round_cost import STAGES, round_cost

        res = round_cost(args.out, args.clients, args.task, args.encoder, args.rounds, not args.no_reference,
                         args.data_dir, args.device)
        rows = [{"clients": r["clients"], "stage": s, "ms": 1e3 * r["stages_s"][s], "floor_ms": 1e3 * r["floors_s"][s],
                 "ratio": r["ratio_to_floor"][s]} for r in res["cohorts"] for s in STAGES]
        table(rows, ["clients", "stage", "ms", "floor_ms", "ratio"])
        print(f"wrote {args.out} and its .png")
        return 0

    p = bs.add_parser("round-cost", help="a round's stages against floors from measured GEMM, FWHT and copy rates")
    p.add_argument("--clients", type=positive_int, nargs="+", default=[100, 1000, 10000], help="cohort sizes")
    p.add_argument("--task", default="fmnist", help="the task (as sstq-fl run --task)")
    p.add_argument("--data-dir", default=None, help="the task's data folder (as sstq-fl run --data-dir)")
    p.add_argument("--encoder", default="sstq-flat:b=4", help="the encoder spec")
    p.add_argument("--rounds", type=positive_int, default=2, help="timed rounds per cohort (median reported)")
    p.add_argument("--no-reference", action="store_true", help="skip timing the previous gradient and Kashin methods")
    p.add_argument("--device", type=device_arg, default="cpu",
                   help="where the clients' side of the rounds runs (cpu, cuda, cuda:N; the server side stays on the "
                        "CPU; on CUDA the previous methods are not timed)")
    p.add_argument("--out", default="results/round_cost.json", help="result JSON (the plot goes next to it)")
    p.set_defaults(fn=cmd)
