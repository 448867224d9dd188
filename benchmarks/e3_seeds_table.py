"""E3 accuracy per run seed and its mean ± standard error, per encoder.

Usage: ``python benchmarks/e3_seeds_table.py benchmarks/results/e3 benchmarks/results/e3_seeds`` (seed 0 from
the first folder's ``comparison.json``, seeds from ``seed*/comparison.json`` in the second; writes
``seeds.md`` and ``seeds.json`` in the second, atomically)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from sstq_fl.io import atomic_write_bytes, atomic_write_json, run_meta


def accuracies(seed0: Path, root: Path) -> dict[str, dict[int, float]]:
    """``{encoder: {seed: test accuracy}}`` for the encoders run at every seed of ``root``."""
    runs = {0: seed0 / "comparison.json"} | {int(p.parent.name[4:]): p for p in root.glob("seed*/comparison.json")}
    out: dict[str, dict[int, float]] = {}
    for seed, path in sorted(runs.items()):
        for r in json.loads(path.read_text())["rows"]:
            out.setdefault(r["encoder"], {})[seed] = r["test_accuracy"]
    seeds = set(runs)
    return {k: v for k, v in out.items() if set(v) == seeds}


def summary(acc: dict[str, dict[int, float]]) -> list[dict[str, Any]]:
    """Mean and standard error of the mean over seeds, per encoder."""
    rows = []
    for enc, by_seed in acc.items():
        vals = list(by_seed.values())
        se = statistics.stdev(vals) / len(vals) ** 0.5 if len(vals) > 1 else float("nan")
        rows.append({"encoder": enc, "by_seed": by_seed, "mean": statistics.fmean(vals), "se": se})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    seeds = sorted(rows[0]["by_seed"])
    head = "| encoder | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± se |"
    lines = [head, "|---" * (len(seeds) + 2) + "|"]
    for r in rows:
        lines.append(f"| {r['encoder']} | " + " | ".join(f"{r['by_seed'][s]:.4f}" for s in seeds)
                     + f" | {r['mean']:.4f} ± {r['se']:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(Path(a).is_dir() for a in argv):
        print("usage: python benchmarks/e3_seeds_table.py E3_DIR SEEDS_DIR", file=sys.stderr)
        return 2
    rows = summary(accuracies(Path(argv[0]), Path(argv[1])))
    if not rows:
        print("error: no encoder was run at every seed", file=sys.stderr)
        return 2
    atomic_write_json(Path(argv[1]) / "seeds.json", {"rows": rows, "meta": run_meta()})
    atomic_write_bytes(Path(argv[1]) / "seeds.md", ("E3 test accuracy at round 100 per run seed\n\n" + markdown(rows)).encode())
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
