#!/usr/bin/env bash
# Set up (idempotent), then lint, type-check and run the default test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Fashion-MNIST comes from Debian's dataset-fashion-mnist package (tests that need it skip without it)
if [ ! -d /usr/share/datasets/fashion-mnist ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) >/dev/null 2>&1 \
    || echo "note: could not install dataset-fashion-mnist; Fashion-MNIST tests will be skipped"
fi
.venv/bin/ruff check sstq_fl tests benchmarks clients strategies
.venv/bin/mypy
.venv/bin/python -m pytest -q "$@"
