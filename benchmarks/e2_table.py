"""E2 table over seeds: each encoder's ‖θ_T − θ*‖² at the last round and its ratio to clean's on the same seed and
dimension, as means with 95 % t-intervals over the seeds.

Usage: ``python benchmarks/e2_table.py benchmarks/results/sweeps/e2_paper`` (reads the sweep's ``results.csv`` or
``results.csv.gz``, writes ``ratios.md``, ``ratios.json`` and ``ratios.png`` there, atomically).  The ratio is
taken per seed (the seed draws θ*, the data and every coin), then averaged: a seed on which clean itself lands far
from θ* moves clean and the encoder together."""

from __future__ import annotations

import csv
import gzip
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from scipy import stats

from sstq_fl.io import atomic_write_bytes, atomic_write_json, run_meta


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """``(mean, low, high)``: the 95 % Student-t interval of the mean (a single value: its own interval)."""
    n, mean = len(values), sum(values) / len(values)
    if n < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def final_distances(path: Path) -> dict[tuple[str, int], dict[int, float]]:
    """``{(encoder spec, d): {seed: distance at the last round}}`` from a sweep's ``results.csv``."""
    last: dict[tuple[str, int, int], tuple[int, float]] = {}
    with (gzip.open(path, "rt", newline="") if path.suffix == ".gz" else path.open(newline="")) as f:
        for r in csv.DictReader(f):
            if r["metric_name"] != "distance_to_optimum":
                continue
            key = (r["encoder_spec"], int(r["dim"]), int(r["seed"]))
            rnd = int(r["round"])
            if key not in last or rnd > last[key][0]:
                last[key] = (rnd, float(r["metric"]))
    out: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    for (spec, d, seed), (_, dist) in last.items():
        out[(spec, d)][seed] = dist
    return out


def collect(root: Path) -> list[dict[str, Any]]:
    """One row per (encoder spec, d): distance and ratio to clean, each a mean with its t-interval."""
    plain = root / "results.csv"
    dist = final_distances(plain if plain.is_file() else root / "results.csv.gz")
    rows = []
    for (spec, d), by_seed in sorted(dist.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        clean = dist[("clean", d)]
        seeds = sorted(set(by_seed) & set(clean))
        ratios = [by_seed[s] / clean[s] for s in seeds]
        rows.append({"encoder": spec, "d": d, "seeds": seeds,
                     "distance": dict(zip(("mean", "low", "high"), t_interval([by_seed[s] for s in seeds]))),
                     "ratio_to_clean": dict(zip(("mean", "low", "high"), t_interval(ratios))),
                     "ratios": ratios})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """Encoders down, d across; each cell ``ratio [95 % interval] (distance)``."""
    dims = sorted({r["d"] for r in rows})
    names = list(dict.fromkeys(r["encoder"] for r in sorted(rows, key=lambda r: r["encoder"] != "clean")))
    cell = {(r["encoder"], r["d"]): r for r in rows}
    n = max(len(r["seeds"]) for r in rows)
    out = [f"ratio of ‖θ_T − θ*‖² to clean's on the same seed, mean [95 % t-interval] over {n} seeds (mean distance)",
           "", "| encoder | " + " | ".join(f"d = {d}" for d in dims) + " |", "|---" * (len(dims) + 1) + "|"]
    for name in names:
        vals = []
        for d in dims:
            r = cell.get((name, d))
            q, dist = (r["ratio_to_clean"], r["distance"]) if r else ({}, {})
            vals.append(f"{q['mean']:.3g} [{q['low']:.3g}, {q['high']:.3g}] ({dist['mean']:.4g})" if r else "–")
        out.append(f"| {name} | " + " | ".join(vals) + " |")
    return "\n".join(out) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """One panel per d: each encoder's ratio to clean with its 95 % t-interval (log scale; 1 = clean)."""
    from matplotlib.figure import Figure

    from sstq_fl.plots import save, title

    dims = sorted({r["d"] for r in rows})
    names = [n for n in dict.fromkeys(r["encoder"] for r in rows) if n != "clean"]
    fig = Figure(figsize=(4.2 * len(dims) + 3.0, 0.32 * len(names) + 1.6), layout="constrained")
    axes = fig.subplots(1, len(dims), sharey=True, squeeze=False)[0]
    cell = {(r["encoder"], r["d"]): r["ratio_to_clean"] for r in rows}
    for ax, d in zip(axes, dims):
        y = [i for i, n in enumerate(names) if (n, d) in cell]
        q = [cell[(names[i], d)] for i in y]
        ax.errorbar([v["mean"] for v in q], y, xerr=[[v["mean"] - v["low"] for v in q], [v["high"] - v["mean"] for v in q]],
                    fmt="o", capsize=3)
        ax.axvline(1.0, color="0.5", lw=1)
        ax.set(xscale="log", xlabel="‖θ_T − θ*‖² / clean's (same seed)", title=f"d = {d}")
        ax.grid(True, which="both", axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(names)), names, fontsize=8)
    axes[0].invert_yaxis()
    n = max(len(r["seeds"]) for r in rows)
    fig.suptitle(title("E2 (benchmarks/experiments/e2_paper.toml): ratio to clean at round 100",
                       {"seeds": n, "interval": "95 % t"}, width=100))
    save(fig, path, dpi=110)
    save(fig, path.with_suffix(".pdf"))


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not any((Path(argv[0]) / f).is_file() for f in ("results.csv", "results.csv.gz")):
        print("usage: python benchmarks/e2_table.py SWEEP_DIR (a sweep folder with results.csv or results.csv.gz)",
              file=sys.stderr)
        return 2
    root = Path(argv[0])
    rows = collect(root)
    if not rows or not any(r["encoder"] == "clean" for r in rows):
        print(f"error: {root}/results.csv has no clean distance_to_optimum rows", file=sys.stderr)
        return 2
    atomic_write_json(root / "ratios.json", {"rows": rows, "meta": run_meta()})
    text = markdown(rows)
    atomic_write_bytes(root / "ratios.md", text.encode())
    plot(rows, root / "ratios.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
