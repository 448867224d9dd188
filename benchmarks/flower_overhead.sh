#!/usr/bin/env bash
# Flower engine: cost of a round with SSTQ encoding versus a plain FedAvg-style round (the
# `clean` encoder: float32 gradients), same model, clients and batches, measured in one run.
# Round times exclude the simulation start-up (Ray and actors), which is reported separately.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/flower
CLIENTS=${CLIENTS:-100}
ROUNDS=${ROUNDS:-5}
for enc in clean sstq-flat:b=4; do
  slug=${enc//[:=,]/_}
  start=$(date +%s.%N)
  .venv/bin/sstq-fl run --task fmnist --engine flower --encoder "$enc" --clients "$CLIENTS" --rounds "$ROUNDS" \
    --out "$OUT/$slug" > /dev/null
  echo "$enc $(awk "BEGIN{print $(date +%s.%N) - $start}")" >> "$OUT/.total_s"
done
.venv/bin/python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
totals = dict(line.split() for line in (out / ".total_s").read_text().splitlines())
rows = []
for enc in ["clean", "sstq-flat:b=4"]:
    m = json.loads((out / enc.replace(":", "_").replace("=", "_").replace(",", "_") / "metrics.json").read_text())
    n = len(m["rounds"])
    rows.append({"encoder": enc, "rounds": n, "clients": m["config"]["clients"],
                 "round_s": m["final"]["wall_s"] / n, "process_total_s": float(totals[enc]),
                 "bits_per_client": m["final"]["bits_per_client"], "test_accuracy": m["final"]["test_accuracy"]})
ratio = rows[1]["round_s"] / rows[0]["round_s"]
from sstq_fl.io import atomic_write_json, run_meta
atomic_write_json(out / "overhead.json", {"rows": rows, "sstq_over_clean_round": ratio, "meta": run_meta()})
(out / ".total_s").unlink()
print(json.dumps(rows, indent=1), "\nSSTQ round / FedAvg-style round:", round(ratio, 3))
PY
