#!/usr/bin/env bash
# The sweep's parallel efficiency on this machine (target >= 0.85): 24 cells as Ray tasks of one CPU each,
# then the same sweep resumed (it must rerun 0 cells).  Writes benchmarks/results/sweeps/efficiency/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/sweeps/efficiency
.venv/bin/sstq-fl sweep benchmarks/experiments/efficiency.toml --out "$OUT" --force
cp "$OUT/sweep.json" "$OUT/sweep_first_run.json"   # the resume below rewrites sweep.json
.venv/bin/sstq-fl sweep benchmarks/experiments/efficiency.toml --out "$OUT" --resume | tee "$OUT/resume.txt"
.venv/bin/python - "$OUT/sweep.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
f = json.load(open(sys.argv[1].replace("sweep.json", "sweep_first_run.json")))
print(f"first run: {f['counts']}, wall {f['wall_s']:.1f} s on {f['cores']} cores, cell seconds {f['cell_seconds']:.1f}, "
      f"parallel efficiency {f['parallel_efficiency']:.3f}; resumed: {s['counts']}, wall {s['wall_s']:.1f} s")
PY
