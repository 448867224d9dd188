"""The command line starts without the heavy packages: importing :mod:`sstq_fl.cli`, building its parser,
``sstq-fl --help`` and the encoder listing import none of torch, Flower, matplotlib, Ray or SciPy (each takes
seconds to import on a loaded machine); the commands that compute import them inside.  Each check runs in a
fresh interpreter, so nothing another test imported hides an import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sstq_fl

HEAVY = ("torch", "flwr", "matplotlib", "ray", "scipy")
TREE = str(Path(sstq_fl.__file__).resolve().parents[1])

CASES = {
    "import": "import sstq_fl.cli",
    "parser": "import sstq_fl.cli as c; c.build_parser(gen=False)",
    "--help": "import sstq_fl.cli as c\ntry:\n    c.main(['--help'])\nexcept SystemExit:\n    pass",
    "encoders": "import sstq_fl.cli as c; c.main(['encoders']); c.main(['encoders', '--json'])",
    "bench --help": "import sstq_fl.cli as c\ntry:\n    c.main(['bench', 'fwht', '--help'])\nexcept SystemExit:\n    pass",
}


def loaded_after(code: str) -> list[str]:
    """The packages of :data:`HEAVY` in ``sys.modules`` after ``code`` ran in a fresh interpreter."""
    probe = ("import contextlib, io, json, sys\nwith contextlib.redirect_stdout(io.StringIO()):\n"
             + "".join(f"    {line}\n" for line in code.splitlines())
             + f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))")
    env = {**os.environ, "PYTHONPATH": TREE}
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, env=env, cwd=TREE)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("case", list(CASES))
def test_cli_start_imports_no_heavy_package(case):
    assert loaded_after(CASES[case]) == []


def test_probe_sees_a_heavy_import():
    """The probe itself: a command that computes does import torch (else the checks above prove nothing)."""
    assert "torch" in loaded_after("import sstq_fl.encoders.base as b; b.torch.zeros(1)")


def test_help_text_is_plain():
    """The top-level description is plain text, not reStructuredText markup."""
    from sstq_fl.cli import build_parser

    text = build_parser(gen=False).format_help()
    assert "The sstq-fl command line." in text and "``" not in text
