"""Importing the package changes nothing outside it; the process-wide settings are the entry point's
(:mod:`sstq_fl.process`), applied by the command line at start-up."""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# In a fresh interpreter: import the package (and its heaviest modules), report whether the environment changed and
# whether glibc's mallopt was called (a ctypes.CDLL that records every libc function looked up).  The libraries it
# builds on are imported first: what they do on import (Flower sets GRPC_VERBOSITY) is theirs.
_IMPORTS = """
import ctypes, json, os, sys
import flwr.app, flwr.clientapp, flwr.serverapp, numpy, torch
looked_up = []
class Spy(ctypes.CDLL):
    def __getattr__(self, name):
        looked_up.append(name)
        return super().__getattr__(name)
ctypes.CDLL = Spy
before = dict(os.environ)
import sstq_fl, sstq_fl.cli, sstq_fl.fl.engine, sstq_fl.fl.clients, sstq_fl.experiments.runner
import sstq_fl.flower, sstq_fl.flower.apps.sstq_client, sstq_fl.flower.apps.sstq_server
after = dict(os.environ)
print(json.dumps({"changed": sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)),
                  "mallopt": "mallopt" in looked_up}))
"""


def _fresh(code: str, env: dict[str, str] | None = None, *args: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO")}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                         env={**clean, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_importing_the_package_leaves_the_environment_and_the_allocator_alone():
    got = json.loads(_fresh(_IMPORTS))
    assert got == {"changed": [], "mallopt": False}


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_the_command_line_applies_the_process_options_first_and_each_can_be_turned_off():
    """The defaults: OMP's passive wait set before torch loads, the allocator tuned; ``--no-...`` turns each off;
    a value the user's environment already holds wins."""
    code = ("import json, sys, os, sstq_fl.process as P, sstq_fl.cli as C\n"
            "torch_then = []\n"
            "def spy(opts):\n"
            "    torch_then.append('torch' in sys.modules)\n"
            "    return P.apply_process_options(opts)\n"
            "C.apply_process_options = spy\n"
            "C.main(sys.argv[1:])\n"
            "print(json.dumps({'omp': os.environ.get('OMP_WAIT_POLICY'), 'tuned': P._TUNED,"
            " 'ray': os.environ.get('RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO'), 'torch': torch_then}))")
    on = json.loads(_fresh(code, None, "options"))
    assert on == {"omp": "PASSIVE", "tuned": [True], "ray": "0", "torch": [False]}  # applied before torch loads
    off = json.loads(_fresh(code, None, "--no-omp-passive", "--no-malloc-tuning", "--no-ray-keep-devices", "options"))
    assert off == {"omp": None, "tuned": [], "ray": None, "torch": [False]}
    user = json.loads(_fresh(code, {"OMP_WAIT_POLICY": "ACTIVE"}, "options"))
    assert user["omp"] == "ACTIVE"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_the_thresholds_are_set_once_per_process():
    code = "from sstq_fl.process import tune_allocator as t; print(t(), t())"
    assert _fresh(code).split() == ["True", "True"]


def test_the_process_options_go_before_the_sub_command(capsys):
    from sstq_fl.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["options", "--no-malloc-tuning"])
    assert exc.value.code == 2 and "unrecognized arguments: --no-malloc-tuning" in capsys.readouterr().err
