#!/usr/bin/env bash
# Flower example app: a round with the LDP encoder (examples/quickstart-ldp: the client mod and the
# strategy wrapper) versus the same app without them (examples/quickstart-pytorch: plain FedAvg),
# Fashion-MNIST, CLIENTS SuperNodes all training every round, measured in one invocation on one
# local simulation SuperLink (private FLWR_HOME, stopped at the end).
#
# A round's time is the ServerApp's own clock: from the end of the central evaluation after round
# t-1 to the start of the one after round t (training only: fraction-evaluate=0; the central
# evaluation is timed separately). Round 1 holds the Ray actors' start-up and is reported apart;
# each run's round time is the median of its rounds 2..ROUNDS. The apps run REPEATS times each,
# alternately (plain, LDP, plain, LDP, ...), and round_s is an app's fastest run (the one least
# disturbed by other load on the machine); the ratio of the pooled medians is reported as well.
# Results: benchmarks/results/flower_example/ (overhead.json, overhead.png, the runs' logs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-benchmarks/results/flower_example}
CLIENTS=${CLIENTS:-100}
ROUNDS=${ROUNDS:-6}
REPEATS=${REPEATS:-3}
MAX_EXAMPLES=${MAX_EXAMPLES:-600}
CPUS_PER_CLIENT=${CPUS_PER_CLIENT:-1}
APPS=(quickstart-pytorch quickstart-ldp)
COMMAND="CLIENTS=$CLIENTS ROUNDS=$ROUNDS REPEATS=$REPEATS MAX_EXAMPLES=$MAX_EXAMPLES CPUS_PER_CLIENT=$CPUS_PER_CLIENT bash benchmarks/flower_overhead.sh"

free_port() { .venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
FLWR_HOME=$(mktemp -d)
WORK=$(mktemp -d)
FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=$(free_port)
FLWR_LOCAL_CONTROL_API_PORT=$(free_port)
export FLWR_HOME FLWR_LOCAL_SUPERLINK_HTTP_API_PORT FLWR_LOCAL_CONTROL_API_PORT
# the runs use this environment (no per-run install from PyPI); passive OpenMP waits (see sstq_fl/__init__.py)
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 OMP_WAIT_POLICY=PASSIVE RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0
export PATH=$ROOT/.venv/bin:$PATH
stop_superlink() {  # on failure the runs' logs stay in $WORK
  for pid in $(pgrep -f "flower-superlink.*$FLWR_HOME" || true); do kill "$pid" || true; done
  rm -rf "$FLWR_HOME"
}
trap stop_superlink EXIT

mkdir -p "$OUT"
# One run of an app; a run whose Ray cluster was killed from outside (e.g. `ray stop --force` on a
# shared machine) is tried once more, and listed in overhead.json's retried_runs.
run_app() {
  local app=$1 run=$2
  for attempt in 1 2; do
    flwr run "$ROOT/examples/$app" --stream \
      --federation-config "num-supernodes=$CLIENTS client-resources-num-cpus=$CPUS_PER_CLIENT" \
      -c "num-server-rounds=$ROUNDS fraction-train=1.0 fraction-evaluate=0.0 max-examples=$MAX_EXAMPLES out-dir='$WORK/$run'" \
      > "$WORK/$run.log" 2>&1
    [ -f "$WORK/$run/result.json" ] && return 0
    cp "$WORK/$run.log" "$WORK/$run.failed-$attempt.log" && echo "$run" >> "$WORK/retried"
  done
  tail -n 40 "$WORK/$run.log"; echo "$run failed twice: no result.json (logs: $WORK)" >&2; exit 1
}

for rep in $(seq "$REPEATS"); do for app in "${APPS[@]}"; do run_app "$app" "$app.$rep"; done; done

.venv/bin/python - "$OUT" "$WORK" "$COMMAND" "$CLIENTS" "$REPEATS" "${APPS[@]}" <<'PY'
import json
import os
import re
import shutil
import statistics
import sys
from pathlib import Path

from sstq_fl.io import atomic_write_json, run_meta


def rounds_s(run: Path) -> tuple[list[float], list[dict]]:
    """One run's per-round seconds (central evaluation t-1 end to t start) and its central evaluations."""
    ev = json.loads((run / "result.json").read_text())["central_evaluation"]
    return [b["start"] - a["end"] for a, b in zip(ev, ev[1:])], ev


def row(work: Path, app: str, repeats: int) -> dict:
    """An app's rounds over its repeated runs: the first (start-up) apart; per run the median of the
    others, and the fastest run's as ``round_s``."""
    runs = [rounds_s(work / f"{app}.{k}") for k in range(1, repeats + 1)]
    run_medians = [statistics.median(r[1:]) for r, _ in runs]
    log = (work / f"{app}.1.log").read_text()
    return {"app": f"examples/{app}", "rounds": len(runs[0][0]), "repeats": repeats, "per_round_s": [r for r, _ in runs],
            "first_round_s": [r[0] for r, _ in runs], "run_median_round_s": run_medians, "round_s": min(run_medians),
            "pooled_median_round_s": statistics.median(s for r, _ in runs for s in r[1:]),
            "central_eval_s": statistics.mean(e["end"] - e["start"] for _, ev in runs for e in ev),
            "test_accuracy": [ev[-1]["accuracy"] for _, ev in runs],
            "strategy_log": [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in log.splitlines()
                             if re.search(r"Starting \w+ strategy|epsilon-spent", ln)][:4]}


def plot(path: Path, rows: list[dict], title: str) -> None:
    """Per-round wall time of every run of both apps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r, color in zip(rows, ["tab:blue", "tab:orange"]):
        for k, per_round in enumerate(r["per_round_s"]):
            ax.plot(range(1, len(per_round) + 1), per_round, marker="o", color=color, alpha=0.8,
                    label=f"{r['app']} (fastest run, median of rounds 2+: {r['round_s']:.2f} s)" if k == 0 else None)
    ax.set(xlabel="round (round 1 includes the Ray actors' start-up)", ylabel="round wall time (s)", ylim=(0, None))
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(out: Path, work: Path, command: str, clients: int, repeats: int, apps: list[str]) -> None:
    """Write overhead.json, overhead.png and the logs of the first run of each app."""
    rows = [row(work, a, repeats) for a in apps]
    ratio = rows[1]["round_s"] / rows[0]["round_s"]
    pooled = rows[1]["pooled_median_round_s"] / rows[0]["pooled_median_round_s"]
    meta = {**run_meta(), "command": command, "loadavg_at_end": os.getloadavg()}
    retried = (work / "retried").read_text().split() if (work / "retried").exists() else []
    atomic_write_json(out / "overhead.json", {"clients": clients, "dataset": "fashion-mnist", "rows": rows,
                                              "ldp_over_plain_round": ratio,
                                              "ldp_over_plain_round_pooled_medians": pooled, "retried_runs": retried,
                                              "meta": meta})
    for a in apps:
        shutil.copyfile(work / f"{a}.1.log", out / f"{a}.log")
    plot(out / "overhead.png", rows, f"{command}\n{clients} clients, Fashion-MNIST, {meta['time_utc']}, "
         f"{meta['machine']['cpus']} CPUs: LDP round / plain FedAvg round = {ratio:.3f} "
         f"(fastest runs; pooled medians {pooled:.3f})")
    print(json.dumps([{k: r[k] for k in ("app", "first_round_s", "round_s", "test_accuracy")} for r in rows], indent=1))
    print("LDP round / plain FedAvg round:", round(ratio, 3), "(fastest runs); pooled medians:", round(pooled, 3))


main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:])
PY
rm -rf "$WORK"
