#!/usr/bin/env bash
# E3 (benchmarks/e3.sh's task and settings) for the Kashin encoders on the default one-stage frame and on
# frame=hd3 (three randomized Hadamard stages) and frame=hd3,rho=5 (N = 131,072: no clipped input found), side by
# side on identical batches, with the clean reference.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/sstq-fl compare --task fmnist --clients 100 --rounds 100 --batch 64 --clip 0.1 --lr 0.2 --epsilon 3 \
  --out benchmarks/results/frame_stack/e3_frames --force \
  --encoders "clean sqkr sqkr:frame=hd3 sqkr:frame=hd3,rho=5 sstq-flat:b=4 sstq-flat:b=4,frame=hd3 sstq-flat:b=4,frame=hd3,rho=5 \
    sstq-ma:b=4 sstq-ma:b=4,frame=hd3"
