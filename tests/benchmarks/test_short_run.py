import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("short_run", ROOT / "benchmarks" / "short_run.py")
assert spec is not None and spec.loader is not None
short_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(short_run)


def test_a_timed_process_imports_the_tree_it_runs_in(tmp_path):
    """A reference checkout's ``sstq_fl`` is the one imported, not the installed (editable) package."""
    fake = tmp_path / "tree" / "sstq_fl"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"open({str(tmp_path / 'marker')!r}, 'w').write(__file__)\n")
    assert short_run.timed([sys.executable, "-c", "import sstq_fl"], tmp_path / "tree") > 0
    assert (tmp_path / "marker").read_text() == str(fake / "__init__.py")


def test_summary_plot_and_commit(tmp_path):
    s = short_run.summary([3.0, 1.0, 2.0])
    assert (s["median_s"], s["min_s"], s["max_s"]) == (2.0, 1.0, 3.0)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert short_run.git_head(ROOT).split("+")[0] == head
    res = {"runs": 3, "cpus": 2, "commits": {"current": "abc"}, "trees": {"current": s}, "floors": {"python": s}}
    short_run.plot(json.loads(json.dumps(res)), tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000
