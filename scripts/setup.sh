#!/usr/bin/env bash
# Create .venv in the project root and install sstq-fl (with the dev tools) into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned: on these machines 2.13.0 is a CPU build already on disk
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[dev]"
echo "sstq-fl installed in .venv: $(.venv/bin/sstq-fl encoders | grep -c "^[a-z]") encoders registered"
