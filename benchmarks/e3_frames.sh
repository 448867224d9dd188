#!/usr/bin/env bash
# E3 (benchmarks/e3.sh's task and settings) for the Kashin encoders on the default one-stage frame, on
# frame=hd3 (three randomized Hadamard stages) and on frame=hd3,rho=5 (N = 131,072: no clipped input found by the
# frame_stack search), side by side on identical batches, with the clean reference; run seed 0 in
# results/frame_stack/e3_frames (SKIP_SEED0=1 keeps it), SEEDS (default "1 2") in its seeds/seed<s>, then the per-seed table (seeds.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/frame_stack/e3_frames
ENC="clean sqkr sqkr:frame=hd3 sqkr:frame=hd3,rho=5 sstq-flat:b=4 sstq-flat:b=4,frame=hd3 sstq-flat:b=4,frame=hd3,rho=5 \
  sstq-ma:b=4 sstq-ma:b=4,frame=hd3"
for s in 0 ${SEEDS:-1 2}; do
  out=$OUT; [[ $s == 0 ]] || out=$OUT/seeds/seed$s
  [[ $s == 0 && -n "${SKIP_SEED0:-}" ]] && continue  # SKIP_SEED0=1: keep the committed seed-0 run
  .venv/bin/sstq-fl compare --task fmnist --clients 100 --rounds 100 --batch 64 --clip 0.1 --lr 0.2 --epsilon 3 \
    --seed "$s" --out "$out" --force --encoders "$ENC"
done
.venv/bin/python benchmarks/e3_seeds_table.py "$OUT" "$OUT/seeds"
