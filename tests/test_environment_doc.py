"""Every ``SSTQ_FL_*`` variable the package reads is a user-facing one with its row in docs/reference/environment.md
(the page names none the package no longer reads), and no module hands a setting to another through the
environment: only the entry point's process settings (:mod:`sstq_fl.process`) write to it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for d in ("sstq_fl", "clients", "strategies") for p in (ROOT / d).rglob("*.py")]
USER_FACING = {"SSTQ_FL_CACHE", "SSTQ_FL_DATA_CACHE", "SSTQ_FL_FMNIST", "SSTQ_FL_MNIST", "SSTQ_FL_LEDGER_DIR",
               "SSTQ_FL_MAX_ARRAY_BYTES"}
"""Where the user's data, caches and ledgers live, and a memory limit: what a user (or a Flower node's operator) sets."""
WRITERS = {"sstq_fl/process.py": "the process-wide options an entry point applies",
           "sstq_fl/gen/runner.py": "cuBLAS's workspace, set with PyTorch's own global deterministic-kernels switch"}
"""The modules that write to the process's environment, and why."""


def test_the_environment_page_lists_exactly_the_variables_the_package_reads():
    used = {m for p in SOURCES for m in re.findall(r"SSTQ_FL_[A-Z_]*[A-Z]", p.read_text())}
    page = (ROOT / "docs" / "reference" / "environment.md").read_text()
    rows = set(re.findall(r"^\| `(SSTQ_FL_[A-Z_]+)` \|", page, re.M))
    assert used and rows == used, (sorted(used - rows), sorted(rows - used))


def test_every_variable_the_package_reads_is_a_user_facing_one():
    used = {m: str(p.relative_to(ROOT)) for p in SOURCES for m in re.findall(r"SSTQ_FL_[A-Z_]*[A-Z]", p.read_text())}
    assert set(used) <= USER_FACING, {m: f for m, f in used.items() if m not in USER_FACING}


def test_no_module_writes_the_environment_but_the_process_settings():
    write = re.compile(r"os\.environ\[[^]]+\]\s*=(?!=)|environ\.(setdefault|update|pop|clear)\(|os\.(putenv|unsetenv)\(")
    found = {str(p.relative_to(ROOT)) for p in SOURCES if write.search(p.read_text())}
    assert found == set(WRITERS), sorted(found ^ set(WRITERS))
