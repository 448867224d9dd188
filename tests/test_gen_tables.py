"""The generative sweeps' tables: releases of a cell, their interval, and the references in tables and plots."""

import importlib
import json
import sys
from pathlib import Path

import pytest

from sstq_fl.io import finite_json

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def gt():
    sys.path.insert(0, str(BENCH))
    yield importlib.import_module("gen_tables")
    sys.path.remove(str(BENCH))


def test_cells_intervals_and_format(gt):
    assert gt.cell_of("cpu_moments_eps1_s2") == ("cpu_moments_eps1", 2)
    assert gt.cell_of("cpu_eps0.2") == ("cpu_eps0.2", None) and gt.cell_of("cpu_sgd_eps1_sx") == ("cpu_sgd_eps1_sx", None)
    mean, half, n = gt.mean_ci([0.1, 0.2, 0.3, None])
    assert n == 3 and mean == pytest.approx(0.2) and half == pytest.approx(4.302653 * 0.1 / 3**0.5, rel=1e-5)
    assert gt.mean_ci([0.5]) == (0.5, None, 1) and gt.mean_ci([None]) == (None, None, 0)
    assert gt.fmt_ci({"a": 0.2, "a_ci": 0.05}, "a", ".2f") == "0.20 ± 0.05"
    assert gt.fmt_ci({"a": 0.2, "a_ci": None}, "a", ".2f") == "0.20" and gt.fmt_ci({}, "a", ".2f") == "-"


def test_group_keeps_older_evaluations_apart(gt):
    new = "lenet (cpu, 2 epochs, 3 probe seed(s))"
    rows = [{"run": "c_eps1", "probe": None, "downstream_accuracy": 0.9},
            *({"run": f"c_eps1_s{s}", "probe": new, "downstream_accuracy": 0.2 + 0.1 * s, "probe_ceiling": 0.75}
              for s in range(3))]
    old, cell = gt.group(rows, ["downstream_accuracy"])
    assert (old["n"], old["downstream_accuracy"], old["downstream_accuracy_ci"]) == (1, 0.9, None)
    assert cell["run"] == "c_eps1" and cell["n"] == 3 and cell["seeds"] == [0, 1, 2]
    assert cell["downstream_accuracy"] == pytest.approx(0.3) and cell["downstream_accuracy_ci"] > 0
    assert gt.plotted([old, cell]) == [cell] and gt.references(rows)["probe_ceiling"] == 0.75


def _metrics(seed: int, acc: float) -> dict:
    ev = {"probe": {"probe": "lenet", "protocol": "cpu", "epochs": 2, "seeds": [seed], "train_samples": 1000}}
    return {"epsilon": 1.0, "delta": 1e-5, "relation": "add_or_remove_one", "randomness": "secure", "method": "moments",
            "port": "none", "downstream_accuracy": acc, "domain_fd": 900.0 + seed, "sample_label_agreement": 0.4,
            "probe_ceiling": 0.75, "fd_floor": 5.3, "evaluator_accuracy": 0.95, "evaluation": ev, "records": 2000,
            "clients": 4, "wall_s": 30.0, "config": {"epsilon": 1.0, "profile": "cpu"},
            "meta": {"time_utc": f"2026-12-01T17:0{seed}:00Z"}}


def test_straightdp_table_shows_intervals_and_references(gt, tmp_path):
    table = importlib.import_module("straightdp_table")
    for s, acc in enumerate((0.30, 0.32, 0.34)):
        (tmp_path / f"t_moments_eps1_s{s}").mkdir()
        (tmp_path / f"t_moments_eps1_s{s}" / "metrics.json").write_text(json.dumps(_metrics(s, acc)))
    table.main(str(tmp_path), "t")
    md = (tmp_path / "sweep_t.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("| t_moments_eps1 |"))
    assert "| 3 |" in line and "0.3200 ± 0.0497" in line and "0.7500" in line and "5.3" in line
    assert "95 % Student-t interval" in md and (tmp_path / "sweep_t.png").is_file()
    summary = (tmp_path / "summary_t.md").read_text().splitlines()
    assert summary[0] == "| row | ε = 1 |"
    assert summary[2] == "| moments only, pixel | 0.320 ± 0.050 · 901 ± 2 (n = 3) |"
    fig = table.plot(json.loads((tmp_path / "sweep_t.json").read_text())["cells"], tmp_path / "p.png",
                     {"probe": "lenet"}, {"probe_ceiling": 0.75, "fd_floor": 5.3})
    labels = [t.get_text() for a in fig.get_axes() for t in a.get_legend().get_texts()]
    assert any(x.startswith("probe ceiling") for x in labels) and any(x.startswith("FD floor") for x in labels)


def test_straightdp_rounds_and_batch_ablations_are_rows_of_their_own(gt):
    table = importlib.import_module("straightdp_table")
    rows = [{"method": "moments+sgd", "sgd_steps": 300, "q": 0.05, "row": "guidance"},
            {"method": "moments+sgd", "sgd_steps": 300, "q": 0.05, "row": "guidance"},
            {"method": "sgd", "sgd_steps": 300, "q": 0.05, "row": "sgd"},
            {"method": "moments+sgd", "sgd_steps": 1000, "q": 0.05, "row": "guidance"},
            {"method": "moments+sgd", "sgd_steps": 150, "q": 0.2, "row": "guidance+tau0.35"},
            {"method": "moments", "sgd_steps": 1000, "q": 0.05, "row": "moments"}]
    table._mark_ablations(rows)
    assert [r["row"] for r in rows] == ["guidance", "guidance", "sgd", "guidance+r1000", "guidance+tau0.35+q0.2+r150",
                                        "moments"]
    assert table._label({**rows[4], "probe": None}) == ("moments + DP-SGD, guidance at τ, pixel, τ = 0.35, "
                                                        "Poisson rate q = 0.2, 150 rounds")


def test_pivot_places_cells_and_refuses_what_it_would_hide(gt):
    cells = [{"run": "a1", "r": "a", "c": "x", "v": 1}, {"run": "b2", "r": "b", "c": "y", "v": 2},
             {"run": "a2", "r": "a", "c": "y", "v": 3}]
    md = gt.pivot(cells, lambda c: c["r"], lambda c: c["c"], lambda c: str(c["v"]), ["x", "y"])
    assert md.splitlines() == ["| row | x | y |", "|---|---|---|", "| a | 1 | 3 |", "| b | – | 2 |"]
    with pytest.raises(ValueError, match=r"two cells at \(a, y\); the second is a3"):
        gt.pivot([*cells, {"run": "a3", "r": "a", "c": "y", "v": 4}], lambda c: c["r"], lambda c: c["c"],
                 lambda c: "", ["x", "y"])
    with pytest.raises(ValueError, match="cell b2 has column 'y'"):
        gt.pivot(cells, lambda c: c["r"], lambda c: c["c"], lambda c: "", ["x"])


@pytest.mark.parametrize("pipeline", ["straightdp", "dp_vqg", "dp_mepf"])
def test_committed_summaries_are_the_committed_runs(gt, pipeline):
    """The documentation includes ``summary_cpu.md``: it is exactly what the table script makes of the sweep's rows
    (``sweep_cpu.json``), and each run folder kept beside it (benchmarks/results/README.md) is its row there, so a
    rerun that is not re-tabulated (or an edited table) fails here."""
    table = importlib.import_module(f"{pipeline}_table")
    out = BENCH / "results" / pipeline
    rows = json.loads((out / "sweep_cpu.json").read_text())["rows"]
    assert table.summary(gt.group(rows, table.KEYS)) == (out / "summary_cpu.md").read_text()
    kept = table.collect(out, "cpu")
    assert kept
    by_run = {r["run"]: r for r in rows}
    for row in kept:  # the row name may carry an ablation mark that only the whole sweep decides
        written = {k: v for k, v in finite_json(row).items() if k != "row"}
        assert written == {k: v for k, v in by_run[row["run"]].items() if k != "row"}, row["run"]
