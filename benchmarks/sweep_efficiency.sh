#!/usr/bin/env bash
# The sweep's parallel efficiency on this machine (target >= 0.85): 24 cells as Ray tasks of one CPU each,
# then the same sweep resumed (it must rerun 0 cells).  sweep.json's "sessions" holds both runs.
# Writes benchmarks/results/sweeps/efficiency/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/sweeps/efficiency
.venv/bin/sstq-fl sweep benchmarks/experiments/efficiency.toml --out "$OUT" --force
.venv/bin/sstq-fl sweep benchmarks/experiments/efficiency.toml --out "$OUT" --resume
gzip -9 -n -c "$OUT/results.csv" > "$OUT/results.csv.gz"
gzip -9 -n -c "$OUT/aggregates.csv" > "$OUT/aggregates.csv.gz"
.venv/bin/python - "$OUT/sweep.json" <<'PY' | tee "$OUT/summary.txt"
import json, sys
first, resumed = json.load(open(sys.argv[1]))["sessions"]
print(f"first run: {first['counts']}, wall {first['wall_s']:.1f} s on {first['cores']} cores, "
      f"sum of cell seconds {first['cell_seconds']:.1f}, parallel efficiency {first['parallel_efficiency']:.3f}")
print(f"resumed:   {resumed['counts']}, wall {resumed['wall_s']:.1f} s")
PY
