#!/usr/bin/env bash
# Issue 45: E3's protocol (benchmarks/e3_seeds.sh) at seeds 0..2 with frames drawn afresh each round (draw=round,
# the default) beside one fixed frame (draw=fixed), and guarantee=whp (delta 1e-6); then the per-seed table.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/frame_round/e3}
for s in ${SEEDS:-0 1 2}; do
  .venv/bin/sstq-fl compare --engine vectorized --task fmnist --clients 100 --rounds 100 --batch 64 --clip 0.1 --lr 0.2 \
    --epsilon 3 --seed "$s" --out "$OUT/seed$s" --force \
    --encoders "sstq-flat:b=4 sstq-flat:b=4,draw=fixed sstq-flat:b=4,guarantee=whp sqkr sqkr:draw=fixed sqkr:guarantee=whp"
done
.venv/bin/python benchmarks/e3_seeds_table.py "$OUT/seed0" "$OUT"
