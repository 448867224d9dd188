#!/usr/bin/env bash
# The committed experiment files, run as sweeps (cells as Ray tasks, one CPU each): E3 (13 encoder settings x
# 5 seeds) and E3 across epsilon and bits (12 encoder settings x 6 epsilons x 3 seeds); SWEEPS=matched_central
# runs the four trust models at matched central epsilon (54 runs).  Each result folder
# keeps sweep.json, final.csv, results.csv.gz, aggregates.csv.gz and the figures (PNG, PDF); the cells' run
# folders, results.json and the uncompressed tables stay local (.gitignore).  RESUME=1 continues killed sweeps.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=--force
[ "${RESUME:-0}" = 1 ] && mode=--resume
for name in ${SWEEPS:-e3 e3_eps}; do
  out=benchmarks/results/sweeps/$name
  .venv/bin/sstq-fl sweep "benchmarks/experiments/$name.toml" --out "$out" $mode
  gzip -9 -n -c "$out/results.csv" > "$out/results.csv.gz"
  gzip -9 -n -c "$out/aggregates.csv" > "$out/aggregates.csv.gz"
done
