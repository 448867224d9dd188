"""Every ``SSTQ_FL_*`` variable the package reads has its row in docs/reference/environment.md, and the page
names none the package no longer reads."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_environment_page_lists_exactly_the_variables_the_package_reads():
    used = {m for p in (ROOT / "sstq_fl").rglob("*.py") for m in re.findall(r"SSTQ_FL_[A-Z_]*[A-Z]", p.read_text())}
    page = (ROOT / "docs" / "reference" / "environment.md").read_text()
    rows = set(re.findall(r"^\| `(SSTQ_FL_[A-Z_]+)` \|", page, re.M))
    assert used and rows == used, (sorted(used - rows), sorted(rows - used))
