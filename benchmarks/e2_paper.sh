#!/usr/bin/env bash
# E2 on the paper's protocol over 10 held-out seeds (benchmarks/experiments/e2_paper.toml says how the protocol was
# fixed): theta* ~ N(0, I), label noise 45, theta_0 = 0, n = 4000 over 200 clients, local batch 20, T = 100, C = 1,
# lr 0.5, eps = 3, d in {100, 200, 500}, b in {4, 8}, every encoder of the paper (its metric-aware one included).
# Then each encoder's ratio to clean on the same seed, mean with a 95 % t-interval (benchmarks/e2_table.py).
# RESUME=1 continues a killed sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/sweeps/e2_paper
mode=--force
[ "${RESUME:-0}" = 1 ] && mode=--resume
.venv/bin/sstq-fl sweep benchmarks/experiments/e2_paper.toml --out "$OUT" $mode
.venv/bin/python benchmarks/e2_table.py "$OUT"
gzip -9 -n -c "$OUT/results.csv" > "$OUT/results.csv.gz"
