#!/usr/bin/env bash
# E3 (spec §5): Fashion-MNIST MLP 784-32-10 (d = 25,450), W = 100 IID shards, T = 100 rounds, batch 64,
# clip 0.1, server cap 10, lr 0.2, b = 4, eps = 3; all encoders on identical batches (vectorized engine).
# kashin=lv rows: the previous default Kashin method (public level 2.352), side by side with the new default.
# Results committed before the Kashin warm-up schedule (benchmarks/results/e3/) are reproduced with warmup=constant
# on the Kashin encoders (sqkr, sstq-*): the same numbers, bit for bit, in 194 s instead of 253 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/sstq-fl compare --task fmnist --clients 100 --rounds 100 --batch 64 --clip 0.1 --lr 0.2 --epsilon 3 \
  --out benchmarks/results/e3 --force \
  --encoders "clean privunit privunit-mrc sqkr sqkr:kashin=lv sstq-flat:b=4 sstq-flat:b=4,kashin=lv \
    sstq-flat:b=4,codebook=optimized sstq-ma:b=4 sstq-ma:b=4,scale=paper sstq-ma:b=4,decode=identity \
    sstq-ma:b=4,scale=paper,decode=identity vqsgd"
