"""The bad-input campaign: every case of :mod:`tests.cli_bad_inputs` (numbers, specs, paths; at least 150) run
in-process, each counted as ok (one ``sstq-fl`` error line, exit 2, nothing written), traceback, silent accept,
written or noisy.  ``python -m tests.test_cli_campaign`` prints the counts and every case that is not ok."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

from .cli_bad_inputs import Folders, all_cases, outcome, verdict


def campaign(root: Path) -> tuple[collections.Counter[str], list[tuple[str, list[str], str]]]:
    """The counts of each verdict over every case, and the cases that are not ok (verdict, argv, stderr)."""
    folders = Folders(root).make()
    counts: collections.Counter[str] = collections.Counter()
    bad = []
    for i, case in enumerate(all_cases()):
        out = root / f"out{i}"
        argv = folders.argv(case, out)
        rc, err = outcome(argv)
        v = verdict(rc, err, out)
        counts[v] += 1
        if v != "ok":
            bad.append((v, argv, err.strip()[-300:]))
    return counts, bad


def test_the_campaign_has_no_traceback_and_no_silent_accept(tmp_path, capsys):
    counts, bad = campaign(tmp_path)
    with capsys.disabled():
        print(f"\ncampaign: {sum(counts.values())} bad inputs, " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    assert sum(counts.values()) >= 150
    assert counts["traceback"] == 0 and counts["silent"] == 0, bad
    assert not bad, bad


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        counts, bad = campaign(Path(d))
    for v, argv, err in bad:
        print(f"{v}: {' '.join(argv)}\n    {err}")
    print(f"{sum(counts.values())} bad inputs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    sys.exit(1 if bad else 0)
