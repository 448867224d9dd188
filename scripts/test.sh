#!/usr/bin/env bash
# Set up (idempotent), then lint, type-check and run the default test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check sstq_fl tests benchmarks clients strategies docker examples
.venv/bin/mypy
.venv/bin/python -m pytest -q "$@"
