"""A third-party package registers an encoder through the entry-point group, untouched repo."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).parent / "plugin_example"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(PLUGIN)], check=True, cwd=build,
                   env={**os.environ, "PIP_NO_CACHE_DIR": "1"})
    assert list(target.glob("sstq_fl_plugin_example-*.dist-info/entry_points.txt"))
    return target


def run_py(code: str, path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(path)}
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout


def test_installed_plugin_is_listed_and_usable(plugin_path):
    out = run_py("from sstq_fl.cli import main; main(['encoders', '--json'])", plugin_path)
    names = {r["name"]: r for r in json.loads(out)}
    assert "rr-coordinate" in names and names["rr-coordinate"]["bits"] == "ceil(log2 d) + 1"
    code = """
import numpy as np, torch
from sstq_fl import wire
from sstq_fl.encoders import make_encoder
enc = make_encoder('rr-coordinate', 16, 2.0, radius=1.0)
x = torch.full((1, 16), 0.25, dtype=torch.float64)
msgs = enc.encode(x.repeat(40000, 1), np.arange(40000))
back = wire.unpack(enc, wire.pack(enc, msgs))
print(enc.payload_bits(), float((enc.aggregate(back) - x[0]).abs().max()), enc.privacy_event().epsilon)
"""
    bits, err, eps = run_py(code, plugin_path).split()
    assert int(bits) == 5 and float(eps) == 2.0
    assert float(err) < 0.15  # unbiased mean of 40k messages (per-coordinate sd ≈ 0.1)


def test_plugin_absent_without_install():
    out = subprocess.run([sys.executable, "-c", "from sstq_fl.encoders import registry; print(sorted(registry()))"],
                         check=True, capture_output=True, text=True).stdout
    assert "rr-coordinate" not in out
