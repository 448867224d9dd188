#!/usr/bin/env bash
# Clients per round at scale (issue 16): the Flower engine with cohort nodes (--clients-per-node) against the
# in-process engine, Fashion-MNIST, sstq-flat:b=4, batch 32, reproducible mode, ROUNDS rounds, both engines in
# one invocation side by side (each in a child process of its own, Ray started locally).
# Per run: each round's wall time (Flower round 1 holds the Ray actors' start-up, reported apart), peak memory
# of the run's whole process tree (PSS sum: driver, Ray, actors) and wire bytes per round.
# FLOWER_ONLY sizes run the Flower engine alone (the in-process engine holds every client's batch and gradient
# at once: 12 GiB at 10,000 clients, so not 60,000).  Fashion-MNIST has 60,000 training records: 60,000 clients
# is the most with disjoint shards (one record each), so it stands in for 100,000.
# Results: benchmarks/results/flower_scale/ (scale.json, scale.png); capacity model: capacity.md there.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/flower_scale}
CLIENTS=${CLIENTS:-"1000 10000"}
PER_NODE=${PER_NODE:-"250 1000"}
FLOWER_ONLY=${FLOWER_ONLY:-""}
ROUNDS=${ROUNDS:-3}
COMMAND="CLIENTS='$CLIENTS' PER_NODE='$PER_NODE' FLOWER_ONLY='$FLOWER_ONLY' ROUNDS=$ROUNDS bash benchmarks/flower_scale.sh"
export RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0 OMP_WAIT_POLICY=PASSIVE
# shellcheck disable=SC2086
.venv/bin/python -m sstq_fl.bench.flower_scale --clients $CLIENTS --per-node $PER_NODE --flower-only $FLOWER_ONLY \
  --rounds "$ROUNDS" --out "$OUT" --command "$COMMAND"
# the capacity model's unit costs (one thread): a cohort node's seconds per client, the server's per message
.venv/bin/python -m sstq_fl.bench.flower_scale --costs-only --out "$OUT" --command "$COMMAND"
# a cohort reply's Flower (protobuf) bytes per virtual client, beside the 19-byte wire message it carries
.venv/bin/python - "$OUT" <<'PY'
import json
import sys
from pathlib import Path

from flwr.app import MetricRecord, RecordDict
from flwr.common.serde import recorddict_to_proto

from sstq_fl.flower.cohort import cohort_record
from sstq_fl.io import atomic_write_json

out = Path(sys.argv[1])
costs = json.loads((out / "costs.json").read_text())
sizes = {}
for m in (1, 1000):
    ids, blobs = list(range(5000, 5000 + m)), [bytes(costs["message_bytes"])] * m
    rd = RecordDict({"arrays": cohort_record(ids, blobs), "metrics": MetricRecord({"num-examples": 32})})
    sizes[str(m)] = recorddict_to_proto(rd).ByteSize() / m
atomic_write_json(out / "costs.json", {**costs, "flower_reply_bytes_per_client": sizes})
print(json.dumps({k: v for k, v in costs.items() if k != "meta"}), sizes)
PY
.venv/bin/python -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps(d["flower_over_inprocess_round"]))' "$OUT/scale.json"
