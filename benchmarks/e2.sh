#!/usr/bin/env bash
# E2 (spec §5): distributed least squares, n = 4000 over W = 200 clients (20 each), local batch 20,
# T = 100 rounds, clip C = 1, server step 0.5, eps = 3, d in {100, 200, 500}, b in {4, 8}.
set -euo pipefail
cd "$(dirname "$0")/.."
for d in 100 200 500; do
  for b in 4 8; do
    .venv/bin/sstq-fl compare --task lsq --dim "$d" --n 4000 --clients 200 --batch 20 --clip 1 --lr 0.5 \
      --rounds 100 --epsilon 3 --out "benchmarks/results/e2/d${d}_b${b}" \
      --encoders "clean sqkr sstq-flat:b=$b sstq-flat:b=$b,codebook=optimized sstq-ma:b=$b vqsgd privunit"
  done
done
