"""``benchmarks/gpu_encode.sh`` and its table on the CPU at tiny sizes (``DEVICES=cpu``): every step runs and lands in
the table; the CPU / GPU ratios are those of the measured seconds; ``benchmarks/gpu_all.sh`` refuses a bad budget."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_encode.sh"


def _table_module():
    spec = importlib.util.spec_from_file_location("gpu_encode_table", ROOT / "benchmarks" / "gpu_encode_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(script: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PY": sys.executable, "OUT": str(tmp_path / "out"), **env}
    return subprocess.run(["bash", str(script)], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_encode")
    res = _run(SCRIPT, tmp, DEVICES="cpu", CLIENTS="4 8", DIM="200", REPS="1", ROUND_TASK="lsq",
               ENCODERS="clean;sstq-flat:guarantee=unbiased")
    assert res.returncode == 0, res.stderr[-2000:]
    return tmp / "out"


def test_every_step_runs_on_the_cpu_and_reaches_the_table(cpu_run):
    names = {p.name for p in cpu_run.iterdir()}
    assert {"encode_cpu_4.json", "encode_cpu_8.json", "round_cpu.json", "round_cpu.png", "gpu_encode.md",
            "gpu_encode.png"} <= names
    table = json.loads((cpu_run / "gpu_encode.json").read_text())
    assert table["dim"] == 200 and table["task"] == "lsq" and table["machine"].startswith("no GPU")
    assert {(r["clients"], r["encoder"]) for r in table["encode"]} == {
        (c, e) for c in (4, 8) for e in ("clean", "sstq-flat:guarantee=unbiased")}
    assert all(r["cpu_s"] > 0 and r["cuda_s"] is None and r["cpu_over_cuda"] is None for r in table["encode"])
    assert [r["stage"] for r in table["round"] if r["clients"] == 8][-1] == "round (wall)"


def test_the_ratio_is_the_cpu_seconds_over_the_gpu_seconds(cpu_run, tmp_path):
    """A GPU run whose every time is a quarter of the CPU's (the CPU files copied as if measured on cuda) gives
    ratio 4 in every row; a folder with no results is a one-line refusal."""
    out = tmp_path / "both"
    shutil.copytree(cpu_run, out)
    for p in list(out.glob("encode_cpu_*.json")):
        res = json.loads(p.read_text())
        for row in res["rows"]:
            row.update({k: row[k] / 4 for k in ("encode_s_per_round", "aggregate_s_per_round",
                                                 "wire_decode_s_per_round")})
        p.with_name(p.name.replace("_cpu_", "_cuda_")).write_text(json.dumps(res))
    rnd = json.loads((out / "round_cpu.json").read_text())
    for c in rnd["cohorts"]:
        c["round_s"] /= 4
        c["stages_s"] = {k: v / 4 for k, v in c["stages_s"].items()}
    (out / "round_cuda.json").write_text(json.dumps(rnd))
    mod = _table_module()
    assert mod.main([str(out)]) == 0
    table = json.loads((out / "gpu_encode.json").read_text())
    ratios = [r["cpu_over_cuda"] for r in [*table["encode"], *table["round"]] if r["cpu_s"]]
    assert ratios and all(r == pytest.approx(4.0) for r in ratios)
    assert mod.main([str(tmp_path)]) == 2


def test_gpu_all_refuses_a_budget_that_is_not_seconds(tmp_path):
    res = _run(ROOT / "benchmarks" / "gpu_all.sh", tmp_path, BUDGET="ten")
    assert res.returncode == 2 and res.stderr.strip() == "gpu_all.sh: BUDGET must be a positive number of seconds, " \
                                                          "got 'ten'"


def test_gpu_all_skips_the_encode_part_at_encode_s_zero(tmp_path):
    """``ENCODE_S=0``: straight to ``gpu_full.sh`` (here its dry run with one kind of job), no encode measurement."""
    res = _run(ROOT / "benchmarks" / "gpu_all.sh", tmp_path, ENCODE_S="0", DRY_RUN="1", ONLY="mepf",
               FULL_OUT=str(tmp_path / "full"), ENCODE_OUT=str(tmp_path / "encode"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "gpu_encode.sh" not in res.stdout and not (tmp_path / "encode").exists()
    assert len((tmp_path / "full" / "commands.txt").read_text().splitlines()) == 3  # mepf at epsilon 1, 10 and inf
    res = _run(ROOT / "benchmarks" / "gpu_all.sh", tmp_path, ENCODE_S="-1")
    assert res.returncode == 2 and "ENCODE_S must be a number of seconds (0: skip)" in res.stderr
