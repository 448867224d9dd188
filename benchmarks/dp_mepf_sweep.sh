#!/usr/bin/env bash
# DP-MEPF epsilon sweep (generative-pipelines spec §4.3) on this machine:
# eps in {0.2, 1, 10}, the non-private reference (eps = inf) and the zero-information
# reference (generator trained on public Fashion-MNIST statistics only); then a table.
#   PROFILE=cpu (default)  the spec's CPU profile (500 generator steps, 1,000 samples) on every private record
#                          (RECORDS=0: all 7,996; RECORDS=2000 is the profile's own size)
#   TAG=large EXTRA="--records 0 --generator-steps 2000 --eval-samples 10000 --probe-epochs 10"
#                          the largest CPU run that fits in an hour here (all 7,996 records)
#   PROFILE=full           the full profile (ResNet-18 Phi, 20k generator steps): a GPU job
# Every run uses secure randomness (RANDOMNESS=reproducible for simulation research only) and
# appends to ONE ledger of the private data set (LEDGER), so the table also shows the data
# set's cumulative epsilon after each run.  Re-running appends again: the data set was read again.
# SEEDS="0 1 2" runs every cell once per seed (independent releases, folders <cell>_s<seed>; the table shows
# their mean and 95 % interval); PROBE_SEEDS (default 3) probe seeds per release (--probe-seeds).
# PARTS="sweep probes" (default) also runs eps = 1 under the logistic-regression and MLP probes at the papers'
# protocol (10 epochs, 10,000 samples): cells <tag>_<probe>_papers_eps1; PARTS=probes runs those alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-cpu}
TAG=${TAG:-$PROFILE}
EXTRA=${EXTRA:-}
RANDOMNESS=${RANDOMNESS:-secure}
OUT=benchmarks/results/dp_mepf
LEDGER=${LEDGER:-$OUT/dataset_ledger.jsonl}
SEEDS=${SEEDS:-0}
RECORDS=${RECORDS:-0}
COMMON=(--profile "$PROFILE" --clients 4 --records "$RECORDS" --randomness "$RANDOMNESS" --dataset-ledger "$LEDGER"
        --probe-seeds "${PROBE_SEEDS:-3}")
PARTS=${PARTS:-sweep probes}  # sweep: the eps cells and references; probes: eps = 1 under the papers' other probes
for s in $SEEDS; do
  if [[ " $PARTS " == *" sweep "* ]]; then
    for e in 0.2 1 10 inf; do
      # shellcheck disable=SC2086
      .venv/bin/sstq-fl gen dp-mepf --epsilon "$e" --seed "$s" "${COMMON[@]}" $EXTRA --force --out "$OUT/${TAG}_eps${e}_s$s"
    done
    # shellcheck disable=SC2086
    .venv/bin/sstq-fl gen dp-mepf --epsilon 1 --public-only --seed "$s" "${COMMON[@]}" $EXTRA --force \
      --out "$OUT/${TAG}_public_only_s$s"
  fi
  if [[ " $PARTS " == *" probes "* ]]; then  # the DP-MEPF paper's logistic-regression and MLP probes, papers' protocol
    for p in logreg mlp; do
      # shellcheck disable=SC2086
      .venv/bin/sstq-fl gen dp-mepf --epsilon 1 --seed "$s" "${COMMON[@]}" $EXTRA --probe "$p" --probe-protocol papers \
        --eval-samples 10000 --force --out "$OUT/${TAG}_${p}_papers_eps1_s$s"
    done
  fi
done
.venv/bin/python benchmarks/dp_mepf_table.py "$OUT" "$TAG"
