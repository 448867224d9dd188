#!/usr/bin/env bash
# Every GPU measurement of the repository in one run sized to a time budget, for a GPU lent for minutes:
#   1. benchmarks/gpu_encode.sh  encode and cohort rounds at 1,000 and 10,000 clients, CPU beside GPU
#                                (at most ENCODE_S seconds, default 210; ENCODE_S=0 skips it)
#   2. benchmarks/gpu_full.sh    the generative pipelines, all twelve jobs at once (PARALLEL, default 12: ten at
#                                eps = 1 and 10, and the eps = inf references of DP-MEPF and StraightDP's moments),
#                                each job given what is left of BUDGET (default 560 s) less 30 s for the table
# ARCHIVE=path.tgz packs both result folders into one file (private diagnostics left out), for a machine that
# returns few files.  PY, SCALE, DEVICES, CLIENTS and the other variables of the two scripts pass through
# (SCALE=tiny DEVICES=cpu runs the whole chain on a CPU; tests/benchmarks/test_gpu_encode.py checks its budget).
# Exit status: 0 when both scripts succeeded, else 1 (each one's own status is printed).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
BUDGET=${BUDGET:-560}
ENCODE_S=${ENCODE_S:-210}
ENCODE_OUT=${ENCODE_OUT:-benchmarks/results/gpu_encode}
FULL_OUT=${FULL_OUT:-benchmarks/results/gpu_full}
[[ "$BUDGET" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_all.sh: BUDGET must be a positive number of seconds, got '$BUDGET'" >&2; exit 2; }
[[ "$ENCODE_S" =~ ^[0-9]+$ ]] || { echo "gpu_all.sh: ENCODE_S must be a number of seconds (0: skip), got '$ENCODE_S'" >&2; exit 2; }
elapsed() { echo $(( $(date +%s) - T0 )); }
rc=0
if (( ENCODE_S > 0 )); then
  echo "== gpu_encode.sh (at most ${ENCODE_S} s)"
  OUT=$ENCODE_OUT timeout "$ENCODE_S" bash benchmarks/gpu_encode.sh || { echo "gpu_encode.sh: exit $?"; rc=1; }
fi
left=$(( BUDGET - $(elapsed) ))
if (( left < 90 )); then
  echo "gpu_all.sh: $left s left of the ${BUDGET} s budget, too little for gpu_full.sh" >&2; rc=1
else
  echo "== gpu_full.sh at $(elapsed) s: $left s left"
  OUT=$FULL_OUT PARALLEL=${PARALLEL:-12} JOB_S=${JOB_S:-$(( left - 30 ))} timeout $(( left - 10 )) \
    bash benchmarks/gpu_full.sh || { echo "gpu_full.sh: exit $?"; rc=1; }
fi
if [[ -n "${ARCHIVE:-}" ]]; then
  tar czf "$ARCHIVE" --exclude='*/private_diagnostics.json' "$ENCODE_OUT" "$FULL_OUT" 2>/dev/null \
    || echo "gpu_all.sh: packing $ARCHIVE left out what was missing" >&2
fi
echo "== done at $(elapsed) s (exit $rc)"
exit "$rc"
