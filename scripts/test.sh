#!/usr/bin/env bash
# Set up (idempotent), then lint, type-check, run the default test suite while the wheel is built and smoke-run in a
# fresh environment outside the clone (scripts/wheel_smoke.sh: mostly pip's installs; its log is printed whole after
# the tests, and either failing fails this script), and build the docs site (--strict).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check sstq_fl tests benchmarks clients strategies docker examples scripts
.venv/bin/mypy
SMOKE_LOG=$(mktemp "${TMPDIR:-/tmp}/sstq-fl-wheel-smoke.XXXXXX")
bash scripts/wheel_smoke.sh >"$SMOKE_LOG" 2>&1 &
SMOKE=$!
trap 'kill "$SMOKE" 2>/dev/null || true; rm -f "$SMOKE_LOG"' EXIT
tests=0
.venv/bin/python -m pytest -q -n 2 --dist loadgroup "$@" || tests=$?   # 2 workers; xdist groups: tests/conftest.py
smoke=0
wait "$SMOKE" || smoke=$?
echo "== wheel smoke (scripts/wheel_smoke.sh, run beside the tests): exit $smoke"
cat "$SMOKE_LOG"
[ "$tests" -eq 0 ] || { echo "tests failed (pytest exit $tests)"; exit "$tests"; }
[ "$smoke" -eq 0 ] || { echo "wheel smoke failed (exit $smoke)"; exit "$smoke"; }
bash scripts/docs.sh
