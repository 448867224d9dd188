#!/usr/bin/env bash
# Build the documentation site into site/ (open site/index.html; it works offline, from file://).
# Installs the doc tools (pyproject's "docs" optional dependencies at constraints.txt's versions, without reinstalling the
# project) into the project's environment (.venv, made by scripts/setup.sh, or $PYTHON's), then
# builds with --strict: any MkDocs warning fails the build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "no $PY: run bash scripts/setup.sh first (or set PYTHON)" >&2; exit 2; }
mapfile -t DOCS_DEPS < <("$PY" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))')
"$PY" -m pip install --quiet -c constraints.txt "${DOCS_DEPS[@]}"
NO_MKDOCS_2_WARNING=1 "$PY" -m mkdocs build --strict -d site "$@"
