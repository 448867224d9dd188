"""DP-MEPF under secure aggregation against the trusted aggregator, on the CPU protocol, at one epsilon.

Each cell is ``sstq-fl gen dp-mepf`` with the committed CPU sweep's settings (``benchmarks/dp_mepf_sweep.sh``:
``--profile cpu --clients 4 --records 0`` (all 7,996 private records), secure randomness, the LeNet-5 probe on the
CPU protocol with 3 probe seeds), once with ``--trust aggregator`` (the server noises the clipped sums) and once
with ``--trust secagg`` (each client adds its own discrete Gaussian share; the server decodes the modular sum), for
each release seed.  Every run appends to one data-set ledger (``dataset_ledger.jsonl`` here).  Then
``summary.json`` and ``summary.md``: per trust model the mean over the releases and its 95 % Student-t interval,
the ratio secagg/aggregator of the means, whether secagg's mean lies in the aggregator's interval, and the
committed trusted-aggregator cell of the CPU sweep (``benchmarks/results/dp_mepf/cpu_eps1_s*``) for reference.

    .venv/bin/python benchmarks/gen_secagg.py [--seeds 0 1 2] [--epsilon 1] [--table-only]

Runs whose ``metrics.json`` exists are kept (``--force`` reruns them).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_tables import mean_ci  # noqa: E402

from sstq_fl.io import atomic_write_bytes, atomic_write_json, run_meta  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "gen_secagg"
SWEEP = ROOT / "benchmarks" / "results" / "dp_mepf"
TRUSTS = ("aggregator", "secagg")
KEYS = ("downstream_accuracy", "domain_fd")


def cell(trust: str, eps: float, seed: int) -> str:
    return f"cpu_{trust}_eps{eps:g}_s{seed}"


def command(trust: str, eps: float, seed: int) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / "sstq-fl"), "gen", "dp-mepf", "--epsilon", f"{eps:g}", "--seed", str(seed),
            "--profile", "cpu", "--clients", "4", "--records", "0", "--randomness", "secure", "--probe-seeds", "3",
            "--trust", trust, "--dataset-ledger", str(OUT / "dataset_ledger.jsonl"), "--force",
            "--out", str(OUT / cell(trust, eps, seed))]


def run(trust: str, eps: float, seed: int, force: bool) -> None:
    out = OUT / cell(trust, eps, seed)
    if (out / "metrics.json").exists() and not force:
        return
    t0 = time.perf_counter()
    subprocess.run(command(trust, eps, seed), check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    print(f"{out.name}: {time.perf_counter() - t0:.0f} s", flush=True)


def _row(m: dict[str, Any], run: str) -> dict[str, Any]:
    return {"run": run, "trust": m.get("trust", "aggregator"), "epsilon": m["epsilon"], "delta": m["delta"],
            "relation": m["relation"], "accountant": m.get("accountant"), "noise_std": m.get("noise_std"),
            "downstream_accuracy": m["downstream_accuracy"], "domain_fd": m["domain_fd"],
            "probe_ceiling": m.get("probe_ceiling"), "secagg": m.get("secagg"), "wall_s": m["wall_s"],
            "release_s": (m.get("timings_s") or {}).get("release"), "command": m["meta"]["command"]}


def summarise(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"cell": name, "n": len(rows), "runs": [r["run"] for r in rows]}
    for k in (*KEYS, "noise_std", "epsilon", "release_s"):
        mean, half, _ = mean_ci([r[k] for r in rows])
        out[k], out[f"{k}_ci"] = mean, half
    return out


def collect(eps: float, seeds: list[int]) -> dict[str, Any]:
    rows = {t: [_row(json.loads((OUT / cell(t, eps, s) / "metrics.json").read_text()), cell(t, eps, s))
                for s in seeds if (OUT / cell(t, eps, s) / "metrics.json").exists()] for t in TRUSTS}
    cells = {t: summarise(t, rows[t]) for t in TRUSTS if rows[t]}
    committed = [_row(json.loads(p.read_text()), p.parent.name) for p in sorted(SWEEP.glob(f"cpu_eps{eps:g}_s*/metrics.json"))]
    if committed:
        cells["aggregator (committed CPU sweep)"] = summarise("aggregator (committed CPU sweep)", committed)
    res: dict[str, Any] = {"epsilon": eps, "seeds": seeds, "cells": cells, "runs": rows, "committed_sweep": committed,
                           "meta": run_meta(), "commands": {t: " ".join(command(t, eps, 0)[1:]).replace(" --seed 0", " --seed S")
                                                            for t in TRUSTS}}
    if "aggregator" in cells and "secagg" in cells:
        a, s = cells["aggregator"], cells["secagg"]
        res["comparison"] = {}
        for k in KEYS:
            half = a[f"{k}_ci"]
            lo, hi = (None, None) if half is None else (a[k] - half, a[k] + half)
            ref = cells.get("aggregator (committed CPU sweep)")
            res["comparison"][k] = {
                "ratio_secagg_to_aggregator": s[k] / a[k], "aggregator_interval": [lo, hi],
                "secagg_mean_in_aggregator_interval": None if half is None else bool(lo <= s[k] <= hi),
                "difference_secagg_minus_aggregator": _difference(rows["secagg"], rows["aggregator"], k),
                "secagg_mean_in_committed_interval": None if ref is None or ref.get(f"{k}_ci") is None else
                bool(abs(s[k] - ref[k]) <= ref[f"{k}_ci"])}
        res["noise_std_ratio"] = s["noise_std"] / a["noise_std"]
    return res


def _difference(s: list[dict[str, Any]], a: list[dict[str, Any]], k: str) -> dict[str, Any]:
    """Mean and 95 % Student-t half-width of the per-seed differences secagg − aggregator (the same seed: the same
    split, partition, Φ and generator initialisation; only the release differs)."""
    by_seed = {r["run"].rsplit("_s", 1)[1]: r[k] for r in a}
    diffs = [r[k] - by_seed[r["run"].rsplit("_s", 1)[1]] for r in s if r["run"].rsplit("_s", 1)[1] in by_seed]
    mean, half, n = mean_ci(diffs)
    return {"mean": mean, "ci": half, "n": n}


def _fmt(c: dict[str, Any], k: str, spec: str) -> str:
    if c.get(k) is None:
        return "-"
    half = c.get(f"{k}_ci")
    return format(c[k], spec) + ("" if half is None or not math.isfinite(half) else " ± " + format(half, spec))


def markdown(res: dict[str, Any]) -> str:
    lines = [f"DP-MEPF at ε = {res['epsilon']:g} (δ = 1e-5, replace-one, record-level), CPU protocol: all 7,996 "
             "private records on 4 clients, LeNet-5 probe (CPU protocol, 3 probe seeds), secure randomness.", "",
             "| trust | n | downstream accuracy | domain-FD | noise std per coordinate | ε on the ledger (accountant) |",
             "|---|---|---|---|---|---|"]
    for name, c in res["cells"].items():
        runs = res["runs"].get(name) or res["committed_sweep"]
        acct = runs[0]["accountant"] or "pld"
        lines.append(f"| {name} | {c['n']} | {_fmt(c, 'downstream_accuracy', '.3f')} | {_fmt(c, 'domain_fd', '.0f')} | "
                     f"{_fmt(c, 'noise_std', '.3f')} | {c['epsilon']:.4f} ({acct}) |")
    cmp_ = res.get("comparison")
    if cmp_:
        acc = cmp_["downstream_accuracy"]
        where = [] if acc["secagg_mean_in_aggregator_interval"] is None else [
            f"secagg's mean {'inside' if acc['secagg_mean_in_aggregator_interval'] else 'outside'} the aggregator's 95 % "
            f"interval [{acc['aggregator_interval'][0]:.3f}, {acc['aggregator_interval'][1]:.3f}]"]
        if acc["secagg_mean_in_committed_interval"] is not None:
            where.append(f"{'inside' if acc['secagg_mean_in_committed_interval'] else 'outside'} the committed sweep's")
        d = acc["difference_secagg_minus_aggregator"]
        paired = "" if d["ci"] is None else f"; paired difference per seed {d['mean']:+.3f} ± {d['ci']:.3f} (n = {d['n']})"
        lines += ["", f"secagg / aggregator: accuracy ratio {acc['ratio_secagg_to_aggregator']:.3f} ("
                      + "; ".join(where) + f"){paired}; noise std ratio {res['noise_std_ratio']:.3f}."]
    lines += ["", "Mean ± 95 % Student-t half-width over n independent releases (seeds); each release's accuracy is the "
                  "mean of its 3 probe seeds.  Noise std: of the released sums per coordinate (secagg: γ·√(n·σ²) of "
                  "the decoded sum).  Commands and machine in summary.json."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--table-only", action="store_true")
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for s in args.seeds:
            for t in TRUSTS:
                run(t, args.epsilon, s, args.force)
    res = collect(args.epsilon, args.seeds)
    atomic_write_json(OUT / "summary.json", res)
    atomic_write_bytes(OUT / "summary.md", markdown(res).encode())
    print(markdown(res))
    return 0


if __name__ == "__main__":
    from sstq_fl.process import ProcessOptions, apply_process_options

    apply_process_options(ProcessOptions())  # the sstq-fl command's process settings (sstq_fl.process)
    sys.exit(main())
