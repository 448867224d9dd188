#!/usr/bin/env bash
# Regenerate every committed benchmark result (run on a quiet machine).
set -euo pipefail
cd "$(dirname "$0")/.."
S=.venv/bin/sstq-fl
$S bench mse-vs-dim --out benchmarks/results/e1.json
$S bench encode-speed --clients 100 --dim 25450 --epsilon 3 --bits 4 --out benchmarks/results/encode_speed.json
$S bench encode-speed --clients 10 --dim 25450 --epsilon 3 --bits 4 --reps 5 --encoders "sstq-flat;sstq-ma;sqkr;sstq-flat:iters=60;vqsgd;privunit;privunit-mrc" --inputs zero,gaussian,walsh-flat,frame-row --out benchmarks/results/encode_timing.json
$S bench encode-speed --clients 10 --dim 25450 --epsilon 3 --bits 4 --reps 60 --encoders "vqsgd;privunit;privunit-mrc;clean" --inputs zero,gaussian,walsh-flat,frame-row --out benchmarks/results/encode_timing_direct.json
# issue 25: the stacked frame hd3 beside the default one-stage frame (E1, encode speed, E3)
FR="sqkr sqkr:frame=hd3 sstq-flat:codebook=uniform sstq-flat:codebook=uniform,frame=hd3 sstq-ma sstq-ma:frame=hd3"
$S bench mse-vs-dim --dims 100,1000,10000 --encoders "$FR" --out benchmarks/results/frame_stack/e1_frames.json
$S bench encode-speed --clients 100 --reps 5 --encoders "sstq-flat;sstq-flat:frame=hd3;sstq-flat:frame=hd2;sstq-flat:frame=hd3,rho=5;sqkr;sqkr:frame=hd3" --inputs gaussian,walsh-flat,frame-row --out benchmarks/results/frame_stack/encode_speed_frames.json
$S bench encode-speed --clients 100 --dim 25450 --epsilon 3 --bits 4 --reps 15 --no-loop --no-secure --encoders "sstq-flat;sstq-flat:frame=hd3;sstq-flat:frame=hd3,level=2.5;sstq-flat:frame=hd3,rho=5;sqkr;sqkr:frame=hd3;sqkr:frame=hd3,level=2.5;sqkr:frame=hd3,rho=5" --out benchmarks/results/frame_stack/encode_speed_floor.json
LV="sqkr:frame=hd3 sqkr:frame=hd3,level=2.1 sqkr:frame=hd3,level=2.3 sstq-flat:codebook=uniform,frame=hd3 sstq-flat:codebook=uniform,frame=hd3,level=2.1 sstq-flat:codebook=uniform,frame=hd3,level=2.3 sstq-ma:frame=hd3 sstq-ma:frame=hd3,level=2.1 sstq-ma:frame=hd3,level=2.3"
$S bench mse-vs-dim --dims 100,1000,10000 --encoders "$LV" --out benchmarks/results/frame_stack/e1_levels.json
RH="sstq-flat:codebook=uniform,frame=hd3 sstq-flat:codebook=uniform,frame=hd3,rho=5 sstq-ma:frame=hd3 sstq-ma:frame=hd3,rho=5 sqkr:frame=hd3 sqkr:frame=hd3,rho=5"
$S bench mse-vs-dim --dims 100,1000,10000 --encoders "$RH" --out benchmarks/results/frame_stack/e1_rho.json
bash benchmarks/e3_frames.sh
# guarantee=unbiased: the level proven for every input (sqrt(d) on the one-stage frame), beside the default level
CE="sstq-flat:b=4;sstq-flat:b=4,guarantee=unbiased;sqkr;sqkr:guarantee=unbiased"
$S bench mse-vs-dim --dims 100,1000,10000 --epsilon 3 --bits 4 --trials 200 --encoders "$CE" --out benchmarks/results/frame_stack/e1_certified.json
$S bench encode-speed --clients 100 --dim 25450 --epsilon 3 --bits 4 --reps 5 --encoders "$CE" --inputs gaussian,walsh-flat,frame-row --out benchmarks/results/frame_stack/encode_speed_certified.json
$S compare --engine vectorized --rounds 100 --encoders "$CE" --out benchmarks/results/frame_stack/e3_certified --force
$S bench fwht --out benchmarks/results/fwht.json
$S bench kashin --out benchmarks/results/kashin.json
$S bench ledger --out benchmarks/results/ledger.json
