#!/usr/bin/env bash
# DP-MEPF epsilon sweep (generative-pipelines spec §4.3), CPU profile on this machine:
# eps in {0.2, 1, 10}, the non-private reference (eps = inf) and the zero-information
# reference (generator trained on public Fashion-MNIST statistics only); then a table.
# PROFILE=full runs the full profile (all 7,996 records, ResNet-18 Phi, 20k generator steps).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-cpu}
OUT=benchmarks/results/dp_mepf
for e in 0.2 1 10 inf; do
  .venv/bin/sstq-fl gen dp-mepf --epsilon "$e" --profile "$PROFILE" --clients 4 --out "$OUT/${PROFILE}_eps$e"
done
.venv/bin/sstq-fl gen dp-mepf --epsilon 1 --public-only --profile "$PROFILE" --clients 4 --out "$OUT/${PROFILE}_public_only"
.venv/bin/python benchmarks/dp_mepf_table.py "$OUT" "$PROFILE"
