#!/usr/bin/env bash
# E2 on the paper's protocol (issue 15): theta_true ~ N(0, I) (so ||theta_0 - theta*||^2 grows with d) and label
# noise sigma = 45, chosen so that clean's ||theta_100 - theta*||^2 at d = 200 (about 127) is near the paper's 131.7
# (clean not converged); theta_0 = 0, n = 4000 over W = 200 clients, local batch 20, T = 100, C = 1, lr 0.5, eps = 3,
# d in {100, 200, 500}, b in {4, 8}.  Then the table of each encoder's ratio to clean at round 100.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/e2_paper
for d in 100 200 500; do
  for b in 4 8; do
    .venv/bin/sstq-fl compare --task lsq --dim "$d" --n 4000 --clients 200 --batch 20 --clip 1 --lr 0.5 \
      --rounds 100 --epsilon 3 --lsq-theta-scale 1 --lsq-noise 45 --out "$OUT/d${d}_b${b}" --force \
      --encoders "clean sqkr sstq-flat:b=$b sstq-flat:b=$b,codebook=optimized sstq-ma:b=$b sstq-ma:b=$b,decode=identity vqsgd privunit privunit-mrc"
  done
done
.venv/bin/python benchmarks/e2_table.py "$OUT"
