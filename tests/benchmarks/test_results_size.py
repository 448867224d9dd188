"""benchmarks/results stays small: tables, figures, summaries and one run per experiment (its README)."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
MAX_BYTES = 20 * 1024 * 1024
MAX_FILES = 400


def committed_files() -> list[Path]:
    """The tracked files under benchmarks/results in a git checkout, else every file there."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", str(RESULTS)], cwd=ROOT, capture_output=True,
                             check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = b""
    tracked = [ROOT / name for name in out.decode().split("\0") if name]
    return [p for p in tracked if p.is_file()] if tracked else [p for p in RESULTS.rglob("*") if p.is_file()]


def test_results_folder_stays_under_20_mb_and_400_files():
    files = committed_files()
    assert files, RESULTS
    size = sum(p.stat().st_size for p in files)
    assert len(files) <= MAX_FILES, f"{len(files)} files under benchmarks/results (at most {MAX_FILES})"
    assert size <= MAX_BYTES, f"{size / 2**20:.1f} MiB under benchmarks/results (at most 20 MiB)"
