#!/usr/bin/env bash
# The generative pipelines at the papers' scale on one CUDA GPU, in one file sized for at most 12 minutes on one
# NVIDIA H200 (16 CPU cores): every private record (all 7,996 of the MNIST subset), at eps = 1 and 10, and the
# non-private reference (eps = inf) of the two releases:
#   mepf_eps{1,10,inf}        DP-MEPF, full profile (ResNet-18 Phi on public Fashion-MNIST), GEN_STEPS generator steps
#   sdp_pixel_eps{1,10}       StraightDP moments + DP-SGD (the default guidance port) in pixel space, p = 64, r = 32
#   sdp_latent_eps{1,10}      the same in the latent space of the frozen public autoencoder
#   sdp_moments_eps{1,10,inf} StraightDP moments alone (p = 64): the release the DP-SGD rows build on
#   vqg_dpsgd_eps{1,10}       DP-VQG with the MaskGIT prior trained by DP-SGD on the clients (public tokenizer)
# Every job is evaluated with the papers' probe (LeNet-5, 10 epochs, on all 10,000 samples).  EPSILONS (default
# "1 10 inf") are the eps of the runs; eps = inf runs only the kinds in INF_KINDS (default "mepf sdp_moments": the
# non-private release: the same run without noise, not DP, what the release reaches without noise under that probe;
# INF_KINDS="" leaves eps = inf out).
# Each job runs under `timeout` with its own share of the 12 minutes (JOB_S seconds); a job that does not finish is
# recorded as "timeout" in $OUT/jobs.jsonl and the others still run.  $OUT/machine.json names the machine (GPU,
# driver, torch, commit); $OUT/gpu_full.md is the table (benchmarks/gpu_full_table.py).
#
# DRY_RUN=1 writes each job's command line to $OUT/commands.txt (one per line, shell-quoted) and runs nothing (at
# SCALE=gpu too, with no CUDA check):
# tests/benchmarks/test_gpu_full.py parses every line into its pipeline's config, so an option renamed in the CLI
# fails CI at once; the real tiny run (below) is a slow test.
# SCALE=tiny runs the same jobs with tiny sizes on the CPU in about a minute (tests/benchmarks/test_gpu_full.py
# runs it so the script cannot rot on machines without a GPU); SCALE=gpu (default) needs `torch.cuda.is_available()`.
# PARALLEL=N runs up to N jobs at once (each with nproc/N torch threads; default 1): the jobs are small next to an
# H200, so N = 12 (every job of the default EPSILONS) gives every job the whole budget (JOB_S each) and the 12 jobs
# finish within JOB_S together; their wall_s are then times under contention, not alone.  With fewer slots than
# jobs, a queued job starts late and may not finish inside gpu_all.sh's overall timeout.
# ONLY="sdp_pixel vqg_dpsgd" runs only those jobs (job names without the _eps suffix; default: all five kinds), to
# finish what an earlier run left as timeout in its own OUT.
# Every run uses secure randomness and its own data-set ledger (the runs are independent releases, not one
# user's composition).
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${SCALE:-gpu}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-benchmarks/results/gpu_full}
EPSILONS=${EPSILONS:-1 10 inf}
INF_KINDS=${INF_KINDS-mepf sdp_moments}
PARALLEL=${PARALLEL:-1}
[[ "$PARALLEL" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_full.sh: PARALLEL must be a positive integer, got '$PARALLEL'" >&2; exit 2; }
KINDS="mepf sdp_moments sdp_pixel sdp_latent vqg_dpsgd"
ONLY=${ONLY:-$KINDS}
for k in $ONLY; do
  [[ " $KINDS " == *" $k "* ]] || { echo "gpu_full.sh: ONLY names unknown job '$k' (jobs: $KINDS)" >&2; exit 2; }
done
for k in $INF_KINDS; do
  [[ " $KINDS " == *" $k "* ]] || { echo "gpu_full.sh: INF_KINDS names unknown job '$k' (jobs: $KINDS)" >&2; exit 2; }
done
mkdir -p "$OUT"
case "$SCALE" in
  gpu)
    DEVICE=cuda; JOB_S=${JOB_S:-70}; RECORDS=0; SAMPLES=10000; PROBE=(--probe-epochs 10)
    MEPF=(--profile full --generator-steps "${GEN_STEPS:-4000}")
    SDP=(--pretrain-steps 4000 --distill-steps 1000 --sgd-steps 1000 --q 0.02 --multiplicity 4)
    PIXEL=(--pca 64 --rank 32); LATENT=(--rank 32)
    VQG=(--prior-steps 1000) ;;
  tiny)
    DEVICE=cpu; JOB_S=${JOB_S:-120}; RECORDS=300; SAMPLES=100; PROBE=(--probe-epochs 1)
    MEPF=(--generator-steps 5 --public-records 600)
    SDP=(--public-records 600 --pretrain-steps 3 --distill-steps 2 --sgd-steps 2 --ae-steps 3)
    PIXEL=(--pca 8 --rank 4); LATENT=(--rank 4)
    VQG=(--steps 2 --prior-steps 3 --prior-batch 32 --public-records 600) ;;
  *) echo "gpu_full.sh: SCALE must be gpu or tiny, got '$SCALE'" >&2; exit 2 ;;
esac
if [[ "$DEVICE" == cuda && "${DRY_RUN:-0}" != 1 ]] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_full.sh: no CUDA device here (torch.cuda.is_available() is False); SCALE=tiny runs on the CPU" >&2
  exit 2
fi
"$PY" - "$OUT/machine.json" "$SCALE" <<'EOF'
import json, platform, subprocess, sys, torch
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
info = {"scale": sys.argv[2], "gpu": gpu, "cuda": torch.version.cuda, "torch": torch.__version__,
        "host": platform.node(), "cpu_count": __import__("os").cpu_count(), "commit": commit}
json.dump(info, open(sys.argv[1], "w"), indent=1)
EOF
[[ "${DRY_RUN:-0}" == 1 ]] && : > "$OUT/commands.txt"
COMMON=(--device "$DEVICE" --records "$RECORDS" --eval-samples "$SAMPLES" "${PROBE[@]}" --clients 4 --randomness secure
        --force)
if (( PARALLEL > 1 )); then
  export OMP_NUM_THREADS=$(( $(nproc) / PARALLEL > 0 ? $(nproc) / PARALLEL : 1 ))
fi
LAUNCHED=()
job() {  # job NAME SUBCOMMAND ARGS...: with PARALLEL > 1 in the background once a slot is free, else in the foreground
  [[ " $ONLY " == *" ${1%_eps*} "* ]] || return 0
  [[ "$1" != *_epsinf || " $INF_KINDS " == *" ${1%_eps*} "* ]] || return 0  # eps = inf: only INF_KINDS
  LAUNCHED+=("$1")
  if (( PARALLEL > 1 )) && [[ "${DRY_RUN:-0}" != 1 ]]; then
    while (( $(jobs -rp | wc -l) >= PARALLEL )); do wait -n || true; done
    run_job "$@" &
  else
    run_job "$@"
  fi
}
run_job() {  # run_job NAME SUBCOMMAND ARGS...: one run under `timeout $JOB_S`, its status line in NAME.job.json
  local name=$1 sub=$2; shift 2
  local start rc=0
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    printf '%q ' gen "$sub" "$@" "${COMMON[@]}" --dataset-ledger "$OUT/$name.ledger.jsonl" --out "$OUT/$name" \
      >> "$OUT/commands.txt"
    echo >> "$OUT/commands.txt"
    return
  fi
  start=$(date +%s)
  timeout "$JOB_S" "$PY" -m sstq_fl.cli gen "$sub" "$@" "${COMMON[@]}" --dataset-ledger "$OUT/$name.ledger.jsonl" \
    --out "$OUT/$name" > "$OUT/$name.log" 2>&1 || rc=$?
  local status=ok
  [[ $rc == 124 ]] && status=timeout
  [[ $rc != 0 && $rc != 124 ]] && status="failed (exit $rc)"
  printf '{"job": "%s", "status": "%s", "wall_s": %s}\n' "$name" "$status" $(( $(date +%s) - start )) \
    > "$OUT/$name.job.json"
  echo "$name: $status"
}
for e in $EPSILONS; do
  job "mepf_eps$e" dp-mepf --epsilon "$e" "${MEPF[@]}"
  job "sdp_moments_eps$e" straightdp --method moments --epsilon "$e" "${SDP[@]}" "${PIXEL[@]}"
  job "sdp_pixel_eps$e" straightdp --method moments+sgd --epsilon "$e" "${SDP[@]}" "${PIXEL[@]}"
  job "sdp_latent_eps$e" straightdp --method moments+sgd --space latent --epsilon "$e" "${SDP[@]}" \
    "${LATENT[@]}"
  job "vqg_dpsgd_eps$e" dp-vqg --variant pp --stage2 dpsgd-prior --epsilon "$e" "${VQG[@]}"
done
wait
[[ "${DRY_RUN:-0}" == 1 ]] && exit 0
for name in "${LAUNCHED[@]}"; do cat "$OUT/$name.job.json" && rm "$OUT/$name.job.json"; done > "$OUT/jobs.jsonl"
"$PY" benchmarks/gpu_full_table.py "$OUT"
