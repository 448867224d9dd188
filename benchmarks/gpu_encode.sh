#!/usr/bin/env bash
# Encode and a cohort round at 1,000 and 10,000 clients per round on a CUDA GPU beside the CPU of the same machine,
# in one run (d = 25,450, the Fashion-MNIST MLP):
#   encode_<device>_<clients>.json   sstq-fl bench encode-speed: batched encode, aggregate and wire decode per round,
#                                    reproducible mode, no one-message loop (it grows with the cohort)
#   round_<device>.json (+ .png)     sstq-fl bench round-cost: a training round stage by stage, the clients' side
#                                    (gather, gradients, clip, Kashin, encode) on <device>, the server's on the CPU
#   gpu_encode.md, gpu_encode.json   the table (benchmarks/gpu_encode_table.py): each time on both devices, ratio
# DEVICES (default "cpu cuda"), CLIENTS ("1000 10000"), ENCODERS (';'-separated specs), REPS (3), PY, OUT.
# Without CUDA, DEVICES=cpu runs the same steps (tests/benchmarks/test_gpu_encode.py, at tiny sizes).
# Needs Fashion-MNIST for the round (apt-get install dataset-fashion-mnist, or $SSTQ_FL_FMNIST).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-benchmarks/results/gpu_encode}
DEVICES=${DEVICES:-cpu cuda}
read -r -a CLIENTS <<< "${CLIENTS:-1000 10000}"
ENCODERS=${ENCODERS:-clean;sstq-flat;sqkr;sstq-ma;sstq-flat:guarantee=unbiased;sqkr:guarantee=unbiased}
REPS=${REPS:-3}
DIM=${DIM:-25450}
mkdir -p "$OUT"
FAILED=()
step() {  # step NAME COMMAND...: run it, its output in OUT/NAME.log; a failure is reported and the other steps run
  echo "$1 ..."
  "${@:2}" > "$OUT/$1.log" 2>&1 || { FAILED+=("$1"); echo "$1 failed: $(tail -n 1 "$OUT/$1.log")" >&2; }
}
for dev in $DEVICES; do
  for c in "${CLIENTS[@]}"; do
    step "encode_${dev}_$c" "$PY" -m sstq_fl.cli bench encode-speed --device "$dev" --clients "$c" --dim "$DIM" \
      --reps "$REPS" --no-loop --no-secure --encoders "$ENCODERS" --out "$OUT/encode_${dev}_$c.json"
  done
  step "round_$dev" "$PY" -m sstq_fl.cli bench round-cost --device "$dev" --clients "${CLIENTS[@]}" --rounds 2 \
    --no-reference ${ROUND_TASK:+--task "$ROUND_TASK"} --out "$OUT/round_$dev.json"
done
"$PY" benchmarks/gpu_encode_table.py "$OUT"
if (( ${#FAILED[@]} )); then echo "gpu_encode.sh: failed: ${FAILED[*]} (their logs in $OUT)" >&2; exit 1; fi
