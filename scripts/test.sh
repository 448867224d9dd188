#!/usr/bin/env bash
# Set up (idempotent), then lint, type-check, run the default test suite, build the wheel and smoke-run
# it in a fresh environment outside the clone, and build the docs site (--strict).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check sstq_fl tests benchmarks docker examples scripts
.venv/bin/mypy
.venv/bin/python -m pytest -q -n 2 --dist loadgroup "$@"   # 2 workers; Ray/Flower tests share one (tests/conftest.py)
bash scripts/wheel_smoke.sh
bash scripts/docs.sh
