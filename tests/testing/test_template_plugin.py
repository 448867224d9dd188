"""The template plug-in of examples/encoder-plugin, installed as a distribution, passes the kit."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TEMPLATE = Path(__file__).parents[2] / "examples" / "encoder-plugin"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    source = shutil.copytree(TEMPLATE, build / "encoder-plugin", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    # setuptools builds in the source tree: a private copy, never shared with the wheel smoke (scripts/wheel_smoke.sh,
    # beside the tests in scripts/test.sh) or a stale build/ folder
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(source)], check=True, cwd=build,
                   env={**os.environ, "PIP_NO_CACHE_DIR": "1"})
    assert list(target.glob("sstq_fl_encoder_template-*.dist-info/entry_points.txt"))
    return target


def cli(site, *argv):
    repo = str(Path(__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), repo])}
    return subprocess.run([sys.executable, "-m", "sstq_fl.cli", *argv], capture_output=True, text=True, env=env)


def test_installed_template_passes_every_check(site):
    got = cli(site, "encoders", "check", "template-rr")
    assert got.returncode == 0, got.stdout + got.stderr
    lines = got.stdout.strip().splitlines()[1:]
    assert len(lines) == 7 and all(ln.startswith("PASS ") for ln in lines), got.stdout
    assert "exact" in next(ln for ln in lines if "epsilon-ldp" in ln)


def test_listing_marks_the_plugin_with_its_distribution_and_version(site):
    got = cli(site, "encoders")
    lines = got.stdout.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("template-rr"))
    assert "[plug-in sstq-fl-encoder-template 0.1.0]" in lines[i]
    assert lines[i + 1] == '    bits_formula = "ceil(log2(d)) + 1"  (⌈log2 d⌉ + 1)'
    rows = {r["name"]: r for r in json.loads(cli(site, "encoders", "--json").stdout)}
    assert rows["template-rr"]["origin"] == {"kind": "entry point", "distribution": "sstq-fl-encoder-template",
                                             "version": "0.1.0"}
    assert rows["sstq-flat"]["origin"]["kind"] == "built-in"
