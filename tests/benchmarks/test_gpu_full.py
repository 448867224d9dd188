"""``benchmarks/gpu_full.sh`` at tiny sizes on the CPU (``SCALE=tiny``): every job of the GPU run starts, finishes
and lands in the table, so the script stays runnable on a machine without a GPU; at ``SCALE=gpu`` without CUDA it
refuses in one line."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ..gen.mepf.test_pipeline import needs_data

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_full.sh"
JOBS = ["mepf", "sdp_moments", "sdp_pixel", "sdp_latent", "vqg_dpsgd"]


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PY": sys.executable, "OUT": str(tmp_path / "out"), "HOME": os.environ.get("HOME", ""),
            **env}
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=full, capture_output=True, text=True, timeout=1500)


@pytest.mark.parametrize("scale", ["tiny", "gpu"])
def test_every_jobs_command_line_parses_into_its_pipelines_config(tmp_path, scale):
    """``DRY_RUN=1``: the script's command lines, at both scales, are accepted by ``sstq-fl gen`` (parser and
    config checks) without running anything; the GPU scale's dry run needs no CUDA."""
    from sstq_fl.cli import build_parser
    from sstq_fl.gen.cli import gen_config

    res = _run(tmp_path, SCALE=scale, EPSILONS="1 10", DRY_RUN="1")
    assert res.returncode == 0, res.stderr[-2000:]
    lines = (tmp_path / "out" / "commands.txt").read_text().splitlines()
    assert len(lines) == 2 * len(JOBS) and not (tmp_path / "out" / "gpu_full.json").exists()
    for line in lines:
        args = build_parser().parse_args(shlex.split(line))
        cfg = gen_config(args)
        assert cfg.device == ("cuda" if scale == "gpu" else "cpu") and args.out.startswith(str(tmp_path))


@pytest.mark.slow  # five pipeline runs, 64 s on 2 cores two at a time (warm caches); CI checks the command lines by the dry run
@needs_data
def test_every_job_runs_at_tiny_scale_and_reaches_the_table(tmp_path):
    """Two jobs at a time (PARALLEL=2): the rows still come in launch order."""
    res = _run(tmp_path, SCALE="tiny", EPSILONS="1", JOB_S="900", PARALLEL="2")  # a loaded CI machine is no timeout
    assert res.returncode == 0, res.stderr[-2000:]
    out = tmp_path / "out"
    jobs = [json.loads(s) for s in (out / "jobs.jsonl").read_text().splitlines()]
    assert [j["job"] for j in jobs] == [f"{name}_eps1" for name in JOBS]
    assert all(j["status"] == "ok" for j in jobs), [(j, (out / f"{j['job']}.log").read_text()[-800:]) for j in jobs]
    table = json.loads((out / "gpu_full.json").read_text())
    assert table["machine"]["scale"] == "tiny" and len(table["rows"]) == len(JOBS)
    for row in table["rows"]:
        assert 0.0 < row["epsilon"] <= 1.0 + 1e-9 and 0.0 <= row["accuracy"] <= 1.0
    assert "| mepf_eps1 | ok |" in (out / "gpu_full.md").read_text()


def test_the_gpu_scale_refuses_without_cuda(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    res = _run(tmp_path, SCALE="gpu")
    assert res.returncode == 2 and "no CUDA device here" in res.stderr
    assert _run(tmp_path, SCALE="huge").returncode == 2
    res = _run(tmp_path, SCALE="tiny", PARALLEL="0")
    assert res.returncode == 2 and "PARALLEL must be a positive integer" in res.stderr


def test_only_runs_the_named_jobs_and_refuses_an_unknown_one(tmp_path):
    """``ONLY`` keeps the named kinds at every ε, in launch order; a name that is no job is refused before any run."""
    res = _run(tmp_path, SCALE="gpu", EPSILONS="1 10", DRY_RUN="1", ONLY="vqg_dpsgd sdp_pixel")
    assert res.returncode == 0, res.stderr[-2000:]
    outs = [shlex.split(line)[shlex.split(line).index("--out") + 1] for line in
            (tmp_path / "out" / "commands.txt").read_text().splitlines()]
    assert [Path(o).name for o in outs] == ["sdp_pixel_eps1", "vqg_dpsgd_eps1", "sdp_pixel_eps10", "vqg_dpsgd_eps10"]
    res = _run(tmp_path, SCALE="tiny", ONLY="sdp_pixel nope")
    assert res.returncode == 2 and "ONLY names unknown job 'nope'" in res.stderr
