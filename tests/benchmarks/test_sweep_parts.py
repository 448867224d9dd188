"""The generative sweeps' ``PARTS``: each part runs exactly its rows (counted through a stand-in ``sstq-fl`` that
prints each run's ``--out``, so nothing is trained), a bad part is refused before any run, and ``SEEDS`` multiplies
every row."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUB = '#!/bin/sh\nfor a in "$@"; do [ "$prev" = --out ] && echo "$a"; prev=$a; done\n'


@pytest.fixture
def tree(tmp_path):
    """A copy of the three sweep scripts beside a ``.venv`` whose ``sstq-fl`` and ``python`` run nothing."""
    (tmp_path / "benchmarks").mkdir()
    for name in ("straightdp_sweep.sh", "dp_vqg_sweep.sh", "dp_mepf_sweep.sh"):
        shutil.copy(ROOT / "benchmarks" / name, tmp_path / "benchmarks" / name)
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "sstq-fl").write_text(STUB)
    (bin_ / "python").write_text("#!/bin/sh\ntrue\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    return tmp_path


def _runs(tree: Path, script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(tree / "benchmarks" / script)], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(("script", "part", "runs"), [
    ("straightdp_sweep.sh", "main", 24), ("straightdp_sweep.sh", "ablations", 20), ("straightdp_sweep.sh", "probes", 6),
    ("dp_vqg_sweep.sh", "main", 10), ("dp_vqg_sweep.sh", "ablations", 10),
    ("dp_mepf_sweep.sh", "sweep", 5), ("dp_mepf_sweep.sh", "probes", 2),
])
def test_each_part_runs_its_rows(tree, script, part, runs):
    res = _runs(tree, script, PARTS=part)
    assert res.returncode == 0, res.stderr[-1000:]
    outs = res.stdout.split()
    assert len(outs) == runs == len(set(outs)) and all(o.endswith("_s0") for o in outs)
    assert len(_runs(tree, script, PARTS=part, SEEDS="0 1 2").stdout.split()) == 3 * runs


def test_the_default_is_the_main_part_and_a_bad_part_is_refused(tree):
    for script, default in (("straightdp_sweep.sh", "main"), ("dp_vqg_sweep.sh", "main")):
        assert _runs(tree, script).stdout == _runs(tree, script, PARTS=default).stdout
        res = _runs(tree, script, PARTS="everything")
        assert res.returncode == 2 and not res.stdout and "PARTS takes" in res.stderr


def test_only_picks_from_every_part(tree):
    """``ONLY`` names rows of any part (the docs' reproduction commands name ablation rows)."""
    res = _runs(tree, "dp_vqg_sweep.sh", ONLY="pp_eps1 fp_dpsgd_eps10")
    assert [Path(o).name for o in res.stdout.split()] == ["cpu_pp_eps1_s0", "cpu_fp_dpsgd_eps10_s0"]
    res = _runs(tree, "straightdp_sweep.sh", ONLY="moments_eps1 guidance_r1000_eps3 moments_mlp_papers_eps1")
    assert len(res.stdout.split()) == 3
