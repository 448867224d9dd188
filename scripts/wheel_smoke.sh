#!/usr/bin/env bash
# Build the sdist and the wheel, install the wheel into a fresh virtual environment outside the clone,
# and run the smoke commands there: the demo on both engines (2 rounds), the encoder conformance kit,
# and the LDP example Flower app through `flwr run`; then the old-versions stage: the same wheel installed into a
# second fresh venv that already holds the oldest releases its metadata admits (scripts/lowest.py), which must
# change nothing installed there, and the vectorized demo run there.  Needs the project's .venv (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sstq-fl-wheel.XXXXXX")
export FLWR_HOME="$WORK/flwr-home"   # flwr run's managed local SuperLink: its own home and free ports
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=$(free_port); FLWR_LOCAL_CONTROL_API_PORT=$(free_port)
export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT FLWR_LOCAL_CONTROL_API_PORT
cleanup() { pkill -f "flower-superlink.*$FLWR_HOME" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
step() { printf "== %s (%ss)\n" "$*" "$SECONDS"; }

step "build: sdist and wheel"
.venv/bin/python -m build --no-isolation --sdist --wheel --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 \
  || { tail -20 "$WORK/build.log"; exit 1; }
.venv/bin/python scripts/check_dist.py "$WORK"/dist/*.whl "$WORK"/dist/*.tar.gz
.venv/bin/python -m twine check --strict "$WORK"/dist/*

step "install the wheel into a fresh venv"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --upgrade pip
"$WORK/venv/bin/python" -m pip install --quiet -c "$ROOT/constraints.txt" torch
WHEEL=$(echo "$WORK"/dist/sstq_fl-*.whl)
"$WORK/venv/bin/python" -m pip install --quiet -c "$ROOT/constraints.txt" "$WHEEL[simulation]"   # Ray: demo and flwr run
cd "$WORK"   # outside the clone: nothing of it is importable from here
"$WORK/venv/bin/python" -c "import sstq_fl, sys; assert '$ROOT' not in sstq_fl.__file__, sstq_fl.__file__; print('sstq-fl', sstq_fl.__version__, 'from', sstq_fl.__file__)"
SSTQ="$WORK/venv/bin/sstq-fl"

step "sstq-fl demo --engine vectorized"
"$SSTQ" demo --engine vectorized --rounds 2 --out demo-vectorized
step "sstq-fl demo --engine flower"
"$SSTQ" demo --engine flower --rounds 2 --out demo-flower
"$WORK/venv/bin/python" - <<'PY'
import json, pathlib
v = json.loads(next(pathlib.Path("demo-vectorized").glob("sstq-flat*/metrics.json")).read_text())
f = json.loads(next(pathlib.Path("demo-flower").glob("sstq-flat*/metrics.json")).read_text())
assert [r["test_accuracy"] for r in v["rounds"]] == [r["test_accuracy"] for r in f["rounds"]], "engines differ"
print("both engines: test accuracy", [r["test_accuracy"] for r in f["rounds"]], "versions", f["meta"]["versions"])
PY

step "sstq-fl encoders check (built-ins and the template plug-in)"
cp -r "$ROOT/examples/encoder-plugin" "$WORK/encoder-plugin"   # setuptools builds in the source tree: a private copy
rm -rf "$WORK/encoder-plugin/build" "$WORK"/encoder-plugin/*.egg-info
"$WORK/venv/bin/python" -m pip install --quiet -c "$ROOT/constraints.txt" "$WORK/encoder-plugin"
"$SSTQ" encoders | grep -F "[plug-in sstq-fl-encoder-template 0.1.0]"
for spec in sstq-flat:b=4 sqkr template-rr; do "$SSTQ" encoders check "$spec"; done

flwr_app() {  # flwr run one example app (copied outside the clone), 2 rounds on 4 SuperNodes; central evaluation checked
  local name=$1
  step "flwr run (examples/$name, 2 rounds, 4 SuperNodes)"
  cp -r "$ROOT/examples/$name" "$WORK/$name"
  FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0 PATH="$WORK/venv/bin:$PATH" \
    flwr run "$WORK/$name" --stream --federation-config "num-supernodes=4 client-resources-num-cpus=1" \
    -c "num-server-rounds=2 max-examples=100 out-dir=\"$WORK/$name-out\"" >"$WORK/$name.log" 2>&1 \
    || { tail -30 "$WORK/$name.log"; exit 1; }
  "$WORK/venv/bin/python" -c "
import json; ev = json.load(open('$WORK/$name-out/result.json'))['central_evaluation']
assert [e['round'] for e in ev] == [0, 1, 2], ev; print('$name: central loss', [round(e['loss'], 3) for e in ev])
assert '$name' != 'quickstart-pytorch' or ev[-1]['loss'] < ev[0]['loss'], 'two plain FedAvg rounds learn nothing'" \
    || { tail -30 "$WORK/$name.log"; exit 1; }
  if [ "$name" = quickstart-ldp ]; then  # the client ledger's INFO line reaches flwr run's stream
    grep -q "ledger: [0-9]* LDP messages" "$WORK/$name.log" || { echo "no client-ledger line in flwr run's stream"; exit 1; }
  fi
}
flwr_app quickstart-pytorch
flwr_app quickstart-ldp

step "old versions: the wheel into a fresh venv holding the oldest releases it admits"
OLD_START=$SECONDS
OLD="$WORK/old-venv"
python3 -m venv "$OLD"
"$ROOT/.venv/bin/python" "$ROOT/scripts/lowest.py" pins "$WHEEL" >"$WORK/lowest.txt"
"$OLD/bin/python" -m pip install --quiet -r "$WORK/lowest.txt"   # torch==2.13.0 among them, from this disk
"$OLD/bin/python" -m pip freeze >"$WORK/old-before.txt"
"$OLD/bin/python" -m pip install --quiet "$WHEEL"   # the core, no constraints file: a user's environment
"$OLD/bin/python" -m pip freeze >"$WORK/old-after.txt"
"$ROOT/.venv/bin/python" "$ROOT/scripts/lowest.py" unchanged "$WORK/old-before.txt" "$WORK/old-after.txt"
"$OLD/bin/sstq-fl" demo --engine vectorized --rounds 2 --out demo-old
"$OLD/bin/python" - "$WORK/lowest.txt" <<'PY'
import json, pathlib, sys
meta = json.loads(next(pathlib.Path("demo-old").glob("sstq-flat*/metrics.json")).read_text())["meta"]["versions"]
pins = dict(line.split(";")[0].split("==") for line in open(sys.argv[1]).read().splitlines())
assert all(meta[k] == pins[k] for k in ("numpy", "flwr")), (meta, pins)
print("oldest releases: demo ran on", {k: meta[k] for k in ("flwr", "numpy", "torch", "dp_accounting")})
PY
echo "old-versions stage: $((SECONDS - OLD_START)) s"

step "wheel smoke passed"
