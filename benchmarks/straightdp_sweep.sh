#!/usr/bin/env bash
# StraightDP sweep (the spec's comparison) on this machine, CPU profile, eps in {1, 3, 10, inf} for each row:
#   sgd              uniform DP-SGD with the whole eps            (--method sgd)
#   moments          the moment release alone: samples from the released Gaussians (--method moments)
#   distill          moments, then DP-SGD on t >= tau, the moments entering by distillation
#                                                                 (--method moments+sgd --port distill)
#   guidance         the same split, sampling started at t0 from the released Gaussian
#                                                                 (--method moments+sgd --port guidance)
#   public_guidance  the public prior + guidance from the released moments (--method moments --port guidance)
#   latent_moments   the moment release alone in the latent space of the frozen public autoencoder, decoded
#                                                                 (--method moments --space latent)
#   latent_distill   moments + DP-SGD with distillation, all in the latent space
#                                                                 (--method moments+sgd --port distill --space latent)
#   latent_guidance  moments + DP-SGD with guidance, all in the latent space
#                                                                 (--method moments+sgd --port guidance --space latent)
#   distill_tau035   the tau ablation: distill with tau = 0.35 given instead of the public knee rule's
#                                                                 (--method moments+sgd --port distill --tau 0.35)
#   guidance_tau035, guidance_tau05   the same for guidance at eps in {3, inf}: the model takes over at 0.35 or 0.5
#   guidance_r1000   guidance with 1,000 DP-SGD rounds (--sgd-steps 1000) at eps in {3, inf}: the rounds ablation
#   moments_papers, latent_moments_papers   the moment rows at eps = 1 under the papers' probe protocol (10,000
#                    samples, 10 epochs: --probe-protocol papers --eval-samples 10000); moments_<p>_papers and
#                    latent_moments_<p>_papers the same with the logistic-regression and MLP probes (--probe logreg|mlp)
# Runs are named ${TAG}_<row>_eps<E> under benchmarks/results/straightdp; eps = inf runs are the same
# releases without noise (not DP), drawn as reference lines. EXTRA adds options (e.g. "--tha", or
# "--profile full --device cuda" on a GPU, with a TAG of its own).
# Every run uses secure randomness and appends to ONE ledger of the private data set (LEDGER), or,
# with PER_RUN_LEDGER=1, each run to its own (a shared ledger's budget check re-composes every earlier
# run's events, which grows slow over a long sweep: see benchmarks/dp_vqg_sweep.sh).
# SEEDS="0 1 2" runs each one per seed (--seed; folders ${TAG}_<name>_s<seed>, the table shows their mean and
# 95 % interval), with PROBE_SEEDS (default 3) probe seeds per release (--probe-seeds).
# ONLY="name ..." runs just those runs (e.g. ONLY="sgd_eps3 distill_eps3") before the table.
# PARTS (default "main", or every part with ONLY) picks the rows: main = sgd, moments, guidance, public_guidance,
# latent_moments and latent_guidance at the four eps (24 runs: 63 minutes for one seed on 2 cores, the sum of the
# committed runs' median wall times per row); ablations = distill, latent_distill, the tau, rounds and batch
# ablations (20 runs, about 2.5 hours); probes = the papers'-protocol rows (6 runs, about 6 minutes).  The committed
# table is PARTS="main ablations probes" SEEDS="0 1 2" (about 10 hours on 2 cores; run parts on several machines).
# SIZES (default: 1,500 public pretraining steps, cached and shared by every run, 300 distillation steps and
# 300 DP-SGD rounds; the spec's CPU profile has 300/100/100) and the data are the changes from the CPU profile:
# every private record (RECORDS=0: all 7,996) and, for pixel rows, PIXEL="--pca 64 --rank 32" (the full profile's
# p and r; latent rows release the autoencoder's d = 32 with --rank 32).  The moment rows alone
# (ONLY="moments_eps1 ..."), about a minute a run.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${TAG:-cpu}
SEEDS=${SEEDS:-0}  # "0 1 2": independent releases of every run, folders <name>_s<seed>
PARTS=${PARTS:-$([[ -n "${ONLY:-}" ]] && echo "main ablations probes" || echo main)}  # ONLY picks from every part
for p in $PARTS; do
  [[ " main ablations probes " == *" $p "* ]] || { echo "straightdp_sweep.sh: PARTS takes main, ablations, probes; got '$p'" >&2; exit 2; }
done
part() { [[ " $PARTS " == *" $1 "* ]]; }
EXTRA=${EXTRA:-}
SIZES=${SIZES:---pretrain-steps 1500 --distill-steps 300 --sgd-steps 300}
RECORDS=${RECORDS:-0}
PIXEL=${PIXEL:---pca 64 --rank 32}
LATENT=${LATENT:---rank 32}
OUT=benchmarks/results/straightdp
LEDGER=${LEDGER:-$OUT/dataset_ledger.jsonl}
EPSILONS=(1 3 10 inf)
COMMON=(--clients 4 --records "$RECORDS" --randomness secure --force)
run() {  # run NAME ARGS...: one pipeline run per seed into $OUT/${TAG}_NAME_s<seed>
  local name=$1 s space=$PIXEL; shift
  [[ " $* " == *" --space latent "* ]] && space=$LATENT
  if [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]]; then return; fi
  for s in $SEEDS; do
    local ledger=$LEDGER
    [[ "${PER_RUN_LEDGER:-0}" == 1 ]] && ledger="$OUT/${TAG}_${name}_s$s.dataset_ledger.jsonl"
    # shellcheck disable=SC2086
    .venv/bin/sstq-fl gen straightdp "${COMMON[@]}" --dataset-ledger "$ledger" $SIZES $space $EXTRA "$@" \
      --seed "$s" --probe-seeds "${PROBE_SEEDS:-3}" --out "$OUT/${TAG}_${name}_s$s"
  done
}
if part main; then
  for e in "${EPSILONS[@]}"; do run "sgd_eps$e" --method sgd --epsilon "$e"; done
  for e in "${EPSILONS[@]}"; do run "moments_eps$e" --method moments --epsilon "$e"; done
  for e in "${EPSILONS[@]}"; do run "guidance_eps$e" --method moments+sgd --port guidance --epsilon "$e"; done
  for e in "${EPSILONS[@]}"; do run "public_guidance_eps$e" --method moments --port guidance --epsilon "$e"; done
  for e in "${EPSILONS[@]}"; do run "latent_moments_eps$e" --method moments --space latent --epsilon "$e"; done
  for e in "${EPSILONS[@]}"; do
    run "latent_guidance_eps$e" --method moments+sgd --port guidance --space latent --epsilon "$e"
  done
fi
if part ablations; then
for e in "${EPSILONS[@]}"; do run "distill_eps$e" --method moments+sgd --port distill --epsilon "$e"; done
for e in "${EPSILONS[@]}"; do run "latent_distill_eps$e" --method moments+sgd --port distill --space latent --epsilon "$e"; done
# the rounds ablation: guidance with 1,000 DP-SGD rounds instead of SIZES' 300 (a row's options come last, so
# they override SIZES), noise-free and at eps = 3, to tell the rounds' limit from the noise's
for e in 3 inf; do run "guidance_r1000_eps$e" --method moments+sgd --port guidance --sgd-steps 1000 --epsilon "$e"; done
for t in 0.35 0.5; do
  for e in 3 inf; do run "guidance_tau${t/./}_eps$e" --method moments+sgd --port guidance --tau "$t" --epsilon "$e"; done
done
# the batch ablation: guidance at tau = 0.35 with Poisson rate q = 0.2 (expected batch 1,599 against 400) for 150
# rounds (30 epochs against 15): at eps = 3 the noise per mean-gradient coordinate, sigma/B, falls from 0.0038 to 0.0023
for e in 3 inf; do run "guidance_tau035_q02_eps$e" --method moments+sgd --port guidance --tau 0.35 --q 0.2 --sgd-steps 150 --epsilon "$e"; done
for e in "${EPSILONS[@]}"; do run "distill_tau035_eps$e" --method moments+sgd --port distill --tau 0.35 --epsilon "$e"; done
fi
if part probes; then
  PAPERS=(--probe-protocol papers --eval-samples 10000)
  run "moments_papers_eps1" --method moments --epsilon 1 "${PAPERS[@]}"
  run "latent_moments_papers_eps1" --method moments --space latent --epsilon 1 "${PAPERS[@]}"
  # the papers' other probes (logistic regression, MLP) on the cheap rows, at the papers' protocol
  for p in logreg mlp; do
    run "moments_${p}_papers_eps1" --method moments --epsilon 1 "${PAPERS[@]}" --probe "$p"
    run "latent_moments_${p}_papers_eps1" --method moments --space latent --epsilon 1 "${PAPERS[@]}" --probe "$p"
  done
fi
.venv/bin/python benchmarks/straightdp_table.py "$OUT" "$TAG"
