"""The parsers of ``sstq-fl bench round-cost``, ``bench shuffle``, ``bench encode-speed``, ``bench frame-round`` and
``bench frontier``: built with every command, so the benchmarks' modules (torch, the shuffle accountant) load only
when their command runs."""

from __future__ import annotations

import argparse
from typing import Any


def input_kinds(s: str) -> list[str]:
    """argparse type for ``bench encode-speed --inputs``: comma-separated input kinds, each known, none twice."""
    from .timing import INPUT_KINDS

    out = [v.strip() for v in s.split(",") if v.strip()]
    bad = [v for v in out if v not in INPUT_KINDS]
    if bad or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"expected distinct input kinds from {', '.join(INPUT_KINDS)}, got {s!r}")
    return out


def add_shuffle_parser(bs: Any, table: Any) -> None:
    """``bench shuffle`` (``table(rows, cols)`` prints a result table)."""
    from ..argtypes import out_file, positive_int, probability

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
    p.add_argument("--out", default="results/shuffle.json", type=out_file, help="result JSON (the plot goes next to it)")
    p.set_defaults(fn=cmd)


def add_round_cost_parser(bs: Any, table: Any) -> None:
    """``bench round-cost`` (``table(rows, cols)`` prints a result table)."""
    from ..argtypes import device_arg, out_file, positive_int

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
    p.add_argument("--out", default="results/round_cost.json", type=out_file, help="result JSON (the plot goes next to it)")
    p.set_defaults(fn=cmd)


def add_speed_parser(bs: Any, table: Any) -> None:
    """``bench encode-speed`` (``table(rows, cols)`` prints a result table)."""
    from ..argtypes import DEVICE_HELP, device_arg, item_list, out_file, positive_float, positive_int

    def cmd(args: argparse.Namespace) -> int:
        from ..checks import check_array
        from .speed import encode_speed

        check_array(f"the clients' inputs ({args.clients} × {args.dim})", args.clients * args.dim, 4)
        res = encode_speed(args.clients, args.dim, args.epsilon, args.bits, args.out, args.encoders or None,
                           reps=args.reps, device=args.device, inputs=args.inputs or None, loop=not args.no_loop,
                           secure=not args.no_secure)
        table(res["rows"], ["encoder", "encode_s_per_round", "secure_encode_s_per_round", "secure_over_reproducible",
                            "secure_adaptive_encode_s_per_round", "aggregate_s_per_round", "loop_encode_s_per_round",
                            "bits_per_message", "device"])
        if "by_input" in res:
            table([{"encoder": r["encoder"], "mode": mode, "clock": c, **r[f"{mode}_{c}_s_per_message"],
                    "spread": r[f"{mode}_{c}_spread"]} for r in res["by_input"] for c in ("cpu", "wall")
                   for mode in ("adaptive", "constant_time")],
                  ["encoder", "mode", "clock", *args.inputs, "spread"])
        print(f"wrote {args.out}")
        return 0

    s = bs.add_parser("encode-speed", help="batched encode / aggregate time per round")
    s.add_argument("--clients", type=positive_int, default=100, help="clients encoded per round")
    s.add_argument("--dim", type=positive_int, default=25450, help="vector dimension (25450: the Fashion-MNIST MLP)")
    s.add_argument("--epsilon", type=positive_float, default=3.0, help="per-message LDP epsilon")
    s.add_argument("--bits", type=positive_int, default=4, help="bit width b for encoders that take one")
    s.add_argument("--encoders", type=item_list, default=None,
                   help="space- or ';'-separated encoder specs (default: clean and the E1 set)")
    s.add_argument("--reps", type=positive_int, default=5, help="timed repetitions (the median is reported)")
    s.add_argument("--device", type=device_arg, default="auto", help=DEVICE_HELP)
    s.add_argument("--inputs", type=input_kinds, default="",
                   help="comma-separated input kinds to time one message at a time, adaptive and constant-time encode "
                        "side by side (zero, gaussian, walsh-flat, frame-row; default: none)")
    s.add_argument("--no-loop", action="store_true", help="skip the one-message-at-a-time encode (clients × a message)")
    s.add_argument("--no-secure", action="store_true", help="skip the secure-mode columns (reproducible mode only)")
    s.add_argument("--out", default="results/encode_speed.json", type=out_file, help="result JSON")
    s.set_defaults(fn=cmd)


def add_frame_round_parser(bs: Any, table: Any) -> None:
    """``bench frame-round`` (``table(rows, cols)`` prints a result table)."""
    from ..argtypes import out_file, positive_int, seed_int

    def cmd(args: argparse.Namespace) -> int:
        from .frame_round import CONFIGS, frame_round_clipping

        bad = [c for c in args.configs or [] if c not in CONFIGS]
        if bad:
            raise ValueError(f"unknown configuration {bad[0]!r}; choose from {', '.join(CONFIGS)}")
        res = frame_round_clipping(args.out, args.dim, args.rounds, gradients=args.gradients, configs=args.configs,
                                   data_dir=args.data_dir, seed=args.seed)
        rows = [{"config": k, "pairs": v["pairs"], "clipped": v["clipped"], "upper95": v["upper95"],
                 "public_level": v["public_level"], "max_level": v["max_level"], "passes_max": v["passes_max"]}
                for k, v in res["configs"].items()]
        table(rows, ["config", "pairs", "clipped", "upper95", "public_level", "max_level", "passes_max"])
        print(f"wrote {args.out}")
        return 0

    p = bs.add_parser("frame-round", help="clipping of adversarial inputs on per-round frames: counts and 95%% bounds")
    p.add_argument("--dim", type=positive_int, default=25450, help="input dimension d")
    p.add_argument("--rounds", type=positive_int, default=25, help="rounds (fresh frames) per configuration")
    p.add_argument("--gradients", type=int, default=16, choices=range(0, 101), metavar="0..100",
                   help="Fashion-MNIST clients whose real gradients join each round's inputs (d must be 25,450)")
    p.add_argument("--configs", nargs="+", default=None, help="configurations to measure (default: all)")
    p.add_argument("--data-dir", default=None, help="Fashion-MNIST folder (as sstq-fl run --data-dir)")
    p.add_argument("--seed", type=seed_int, default=0, help="public seed")
    p.add_argument("--out", default="results/frame_round.json", type=out_file, help="result JSON")
    p.set_defaults(fn=cmd)


def add_frontier_parser(bs: Any, table: Any) -> None:
    """``bench frontier`` (``table(rows, cols)`` prints the frontier table)."""
    from ..argtypes import at_least_100, item_list, out_file, positive_float, positive_floats, positive_ints

    def cmd(args: argparse.Namespace) -> int:
        from .frontier import run

        res = run(args.out, args.dims, args.epsilons, radius=args.radius, trials=args.trials,
                  max_point_s=args.max_point_s, encoders=args.encoders or None, resume=args.resume)
        rows = [{"d": f["d"], "epsilon": f["epsilon"], "budget": f["budget"],
                 "best": f["best"]["spec"] if f["best"] else "-", "best_mse": f["best"]["mse"] if f["best"] else None,
                 "sstq": f["sstq"]["spec"] if f["sstq"] else "-", "sstq_ratio": f["sstq_ratio"]} for f in res["frontier"]]
        table(rows, ["d", "epsilon", "budget", "best", "best_mse", "sstq", "sstq_ratio"])
        print(f"wrote {args.out} and its .png")
        return 0

    p = bs.add_parser("frontier", help="per-message MSE against bits per message for every registered encoder and "
                      "width, at each d and epsilon, and the best encoder per bit budget")
    p.add_argument("--dims", type=positive_ints, default="500,25450", help="comma-separated dimensions d")
    p.add_argument("--epsilons", type=positive_floats, default="1,3,6", help="comma-separated per-message epsilons")
    p.add_argument("--clip", dest="radius", type=positive_float, default=1.0,
                   help="clip norm C: the encoders' radius (the input has norm C)")
    p.add_argument("--trials", type=at_least_100, default=400, help="messages per measured (not declared) MSE")
    p.add_argument("--max-point-s", type=positive_float, default=30.0,
                   help="leave out a measured candidate whose --trials messages would take longer here (seconds)")
    p.add_argument("--encoders", type=item_list, default=None, help="space-separated encoder names (default: all)")
    p.add_argument("--resume", action="store_true", help="keep the (d, epsilon) settings already in --out")
    p.add_argument("--out", default="results/frontier.json", type=out_file, help="result JSON (the plot goes next to it)")
    p.set_defaults(fn=cmd)


def add_bench_parsers(bs: Any, table: Any) -> None:
    """Every ``bench`` parser of this module."""
    add_speed_parser(bs, table)
    add_shuffle_parser(bs, table)
    add_round_cost_parser(bs, table)
    add_frame_round_parser(bs, table)
    add_frontier_parser(bs, table)
