"""Sweeps: every cell run once, a resume reruns none, a failing cell is reported while the rest go on,
tables with intervals over seeds, figures, and the CLI (sweep, plot, --config)."""

import csv
import json
import math
from pathlib import Path

import pytest

from sstq_fl.cli import main
from sstq_fl.experiments.results import t_interval
from sstq_fl.experiments.spec import parse_experiment
from sstq_fl.experiments.sweep import SweepOptions, sweep

GRID = b"""task = "lsq"
dim = 16
n = 400
clients = 8
rounds = 2
encoder = ["sstq-flat:b=4", "sqkr"]
epsilon = [1, 3]
seed = [0, 1]
"""


def _local(**kw) -> SweepOptions:
    return SweepOptions(executor="local", **kw)


def test_a_sweep_writes_cells_tables_and_figures_and_a_resume_reruns_none(tmp_path: Path) -> None:
    exp = parse_experiment(GRID, "grid.toml")
    s = sweep(exp, tmp_path, _local())
    assert s["counts"] == {"done": 8, "skipped": 0, "failed": 0}
    cell = tmp_path / "cells" / "encoder-sqkr__epsilon-3__seed-1"
    assert (cell / "metrics.json").is_file() and not list(cell.glob("checkpoint*"))  # removed on completion
    rec = json.loads((cell / "experiment.json").read_text())
    assert rec["experiment"]["sha256"] == exp.sha256 and rec["values"] == {"encoder": "sqkr", "epsilon": 3.0, "seed": 1}
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert len(rows) == 8 * 2 and {r["metric_name"] for r in rows} == {"distance_to_optimum"}
    final = list(csv.DictReader((tmp_path / "final.csv").open()))
    assert len(final) == 4 and {r["seeds"] for r in final} == {"2"}
    for f in ("rounds", "bits", "epsilon"):
        assert (tmp_path / f"{f}.png").stat().st_size > 0 and (tmp_path / f"{f}.pdf").read_bytes()[:4] == b"%PDF"
    mtime = (cell / "metrics.json").stat().st_mtime_ns
    again = sweep(exp, tmp_path, _local(resume=True))
    assert again["counts"] == {"done": 0, "skipped": 8, "failed": 0}
    assert (cell / "metrics.json").stat().st_mtime_ns == mtime


def test_a_resumed_sweep_runs_only_the_missing_cells(tmp_path: Path) -> None:
    exp = parse_experiment(GRID, "grid.toml")
    sweep(exp, tmp_path, _local())
    gone = tmp_path / "cells" / "encoder-sstq-flat_b-4__epsilon-1__seed-0" / "metrics.json"
    kept = json.loads(gone.read_text())["final"]
    gone.unlink()
    s = sweep(exp, tmp_path, _local(resume=True))
    assert s["counts"] == {"done": 1, "skipped": 7, "failed": 0}
    assert math.isclose(json.loads(gone.read_text())["final"]["distance_to_optimum"], kept["distance_to_optimum"],
                        rel_tol=1e-12)  # the least-squares fit differs in its last bit between processes


def test_a_folder_holding_a_sweep_is_refused_without_resume_or_force(tmp_path: Path) -> None:
    exp = parse_experiment(GRID, "grid.toml")
    with pytest.raises(ValueError, match="nothing to resume"):
        sweep(exp, tmp_path, _local(resume=True))
    sweep(exp, tmp_path, _local(), seed=0, epsilon=1.0)
    with pytest.raises(ValueError, match="already holds a sweep"):
        sweep(exp, tmp_path, _local())
    assert sweep(exp, tmp_path, _local(force=True), seed=0, epsilon=1.0)["counts"]["done"] == 2


def test_a_failing_cell_is_reported_in_one_line_and_the_others_finish(tmp_path: Path, capsys) -> None:
    f = tmp_path / "bad.toml"
    f.write_bytes(GRID + b"lr = [0.2, 1e300]\n")  # the second learning rate diverges in round 1 (a run-time failure)
    code = main(["sweep", str(f), "--out", str(tmp_path / "o"), "--executor", "local", "--set", "seed=0",
                 "--set", "epsilon=3", "--set", 'encoder="sqkr"'])
    out = capsys.readouterr()
    assert code == 1 and "1 cells run, 0 already complete, 1 failed" in out.out
    failed = [c for c in json.loads((tmp_path / "o" / "sweep.json").read_text())["cells"] if c["status"] == "failed"]
    assert len(failed) == 1 and "diverged" in failed[0]["error"] and "\n" not in failed[0]["error"]


def test_t_interval_matches_the_student_t_formula() -> None:
    mean, sd, low, high = t_interval([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and math.isclose(sd, 1.2909944487358056)
    assert math.isclose(high - mean, 3.182446305284263 * sd / 2) and math.isclose(mean - low, high - mean)
    assert t_interval([5.0])[2:] == (None, None)


def test_sweep_on_ray_runs_cells_in_parallel_and_plot_redraws(tmp_path: Path, capsys) -> None:
    f = tmp_path / "grid.toml"
    f.write_bytes(GRID)
    assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "--set", "seed=0"]) == 0
    s = json.loads((tmp_path / "o" / "sweep.json").read_text())
    assert s["sessions"][-1]["executor"] == "ray" and s["counts"]["done"] == 4 and s["cores"] >= 1
    for p in (tmp_path / "o").glob("*.p*"):
        p.unlink()
    assert main(["plot", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "bits.pdf").is_file() and (tmp_path / "o" / "epsilon.png").is_file()
    assert main(["plot", str(tmp_path)]) == 2
    assert "holds no sweep results" in capsys.readouterr().err


def test_run_takes_its_options_from_a_config_file_and_the_command_line_overrides(tmp_path: Path) -> None:
    f = tmp_path / "one.toml"
    f.write_bytes(b'task = "lsq"\ndim = 16\nn = 400\nclients = 8\nrounds = 3\nencoder = "sqkr"\nepsilon = 2\n')
    assert main(["run", "--config", str(f), "--rounds", "2", "--out", str(tmp_path / "r")]) == 0
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["config"]["rounds"] == 2 and m["config"]["encoder"] == "sqkr" and m["config"]["epsilon"] == 2.0
    rec = json.loads((tmp_path / "r" / "experiment.json").read_text())
    assert rec["experiment"]["file"] == str(f)
    f.write_bytes(GRID)
    assert main(["run", "--config", str(f), "--out", str(tmp_path / "r2")]) == 2


def test_plot_redraws_from_the_gzipped_tidy_table_alone(tmp_path: Path) -> None:
    import gzip

    exp = parse_experiment(GRID, "grid.toml")
    sweep(exp, tmp_path, _local(), seed=0)
    final = (tmp_path / "final.csv").read_text()
    (tmp_path / "results.csv.gz").write_bytes(gzip.compress((tmp_path / "results.csv").read_bytes()))
    for name in ("results.json", "results.csv", "rounds.png", "bits.pdf"):
        (tmp_path / name).unlink()
    assert main(["plot", str(tmp_path)]) == 0
    assert (tmp_path / "rounds.png").is_file() and (tmp_path / "bits.pdf").is_file()
    from sstq_fl.experiments.sweep import read_results

    doc = read_results(tmp_path)
    assert len(doc["final"]) == len(final.splitlines()) - 1 and doc["experiment"]["title"] == "grid.toml"


def test_compare_takes_its_encoders_from_a_config_file_and_writes_the_sweep_tables(tmp_path: Path) -> None:
    f = tmp_path / "cmp.toml"
    f.write_bytes(b'task = "lsq"\ndim = 16\nn = 400\nclients = 8\nrounds = 4\nencoder = ["clean", "sqkr"]\n')
    assert main(["compare", "--config", str(f), "--rounds", "2", "--out", str(tmp_path / "c")]) == 0
    rows = json.loads((tmp_path / "c" / "comparison.json").read_text())["rows"]
    assert [r["encoder"] for r in rows] == ["clean", "sqkr"]
    assert json.loads((tmp_path / "c" / "sqkr" / "metrics.json").read_text())["config"]["rounds"] == 2
    final = list(csv.DictReader((tmp_path / "c" / "final.csv").open()))
    assert [r["encoder_spec"] for r in final] == ["clean", "sqkr"] and {r["round"] for r in final} == {"2"}
    rec = json.loads((tmp_path / "c" / "sqkr" / "experiment.json").read_text())
    assert rec["experiment"]["file"] == str(f) and rec["values"] == {"encoder": "sqkr"}
    assert main(["compare", "--config", str(f), "--encoders", "vqsgd", "--out", str(tmp_path / "d")]) == 0
    assert [r["encoder"] for r in json.loads((tmp_path / "d" / "comparison.json").read_text())["rows"]] == ["vqsgd"]


def test_a_resumed_sweep_never_trains_over_another_configs_completed_run(tmp_path: Path) -> None:
    exp = parse_experiment(GRID, "grid.toml")
    sweep(exp, tmp_path, _local(), seed=0, epsilon=1.0)
    s = sweep(exp, tmp_path, _local(resume=True), seed=0, epsilon=1.0, rounds=3)
    assert s["counts"] == {"done": 0, "skipped": 0, "failed": 2}
    assert all("different config" in c["error"] for c in s["cells"])
    assert s["overrides"]["rounds"] == 3 and json.loads((tmp_path / "results.json").read_text())["rows"] == []


def test_a_cell_line_with_a_non_finite_metric_reads_n_a() -> None:
    from sstq_fl.experiments.runner import CellResult

    line = CellResult("c", "skipped", final={"test_accuracy": None, "bits_per_client": 20}).line()
    assert line == "c: test accuracy n/a, 20 bits/client (already complete)"
