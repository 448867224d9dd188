"""A sweep's final table as markdown, sorted by bits per client: each cell's encoder, privacy, bits per client and
final metric, mean with its 95 % t-interval over the seeds (the sweep's own ``final.csv`` columns).

Usage: ``python benchmarks/sweep_table.py benchmarks/results/sweeps/e3_frontier`` (writes ``final.md`` there,
atomically, and prints it)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from sstq_fl.io import atomic_write_bytes


def markdown(path: Path) -> str:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no rows")
    rows.sort(key=lambda r: (float(r["bits_per_client_mean"]), -float(r["metric_mean"])))
    name = rows[0]["metric_name"].replace("_", " ")
    out = [f"| encoder | privacy | bits per client | {name}: mean [95 % interval] | seeds |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r['encoder_spec']}` | {r.get('encoder_privacy') or '–'} | {float(r['bits_per_client_mean']):,.0f} "
                   f"| {float(r['metric_mean']):.4f} [{float(r['metric_ci_low']):.4f}, {float(r['metric_ci_high']):.4f}] "
                   f"| {r['seeds']} |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    final = Path(argv[0]) / "final.csv" if len(argv) == 1 else None
    if final is None or not final.is_file():
        print("usage: python benchmarks/sweep_table.py SWEEP_DIR (a sweep folder with final.csv)", file=sys.stderr)
        return 2
    text = markdown(final)
    atomic_write_bytes(final.with_suffix(".md"), text.encode())
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
