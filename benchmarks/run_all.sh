#!/usr/bin/env bash
# Regenerate every committed benchmark result (run on a quiet machine).
set -euo pipefail
cd "$(dirname "$0")/.."
S=.venv/bin/sstq-fl
$S bench mse-vs-dim --out benchmarks/results/e1.json
$S bench encode-speed --clients 100 --dim 25450 --epsilon 3 --bits 4 --out benchmarks/results/encode_speed.json
$S bench encode-speed --clients 10 --dim 25450 --epsilon 3 --bits 4 --reps 5 --encoders "sstq-flat;sstq-ma;sqkr;sstq-flat:iters=60;vqsgd;privunit;privunit-mrc" --inputs zero,gaussian,walsh-flat,frame-row --out benchmarks/results/encode_timing.json
$S bench encode-speed --clients 10 --dim 25450 --epsilon 3 --bits 4 --reps 60 --encoders "vqsgd;privunit;privunit-mrc;clean" --inputs zero,gaussian,walsh-flat,frame-row --out benchmarks/results/encode_timing_direct.json
$S bench fwht --out benchmarks/results/fwht.json
$S bench kashin --out benchmarks/results/kashin.json
$S bench ledger --out benchmarks/results/ledger.json
