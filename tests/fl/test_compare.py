import json

import pytest

from sstq_fl.cli import main


def test_compare_writes_table_plot_and_per_encoder_runs(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--task", "lsq", "--dim", "16", "--n", "200", "--clients", "10", "--batch", "20", "--clip", "1",
            "--lr", "0.5", "--rounds", "4", "--encoders", "clean sstq-flat:b=3 vqsgd", "--out", str(out)]
    assert main(args) == 0
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    assert [r["encoder"] for r in rows] == ["clean", "sstq-flat:b=3", "vqsgd"]
    assert rows[0]["bits_per_client"] == 32 * 16 and rows[1]["bits_per_client"] == 6 + 3 and rows[2]["bits_per_client"] == 4 + 1
    md = (out / "comparison.md").read_text()
    assert md.startswith("| encoder | bits_per_client |") and "sstq-flat:b=3" in md
    assert md.split("\n")[2].split(" | ")[4] == "inf"  # clean's ε, stored as null in its metrics.json
    assert "| wall_s | setup_s |" in md and all(r["setup_s"] >= 0 for r in rows)
    assert (out / "comparison.png").stat().st_size > 1000
    for slug in ("clean", "sstq-flat_b-3", "vqsgd"):
        m = json.loads((out / slug / "metrics.json").read_text())
        assert len(m["rounds"]) == 4 and {"round", "train_loss", "bits_per_client", "epsilon_spent"} <= set(m["rounds"][0])


def test_run_command_reports_and_validates(tmp_path, capsys):
    assert main(["run", "--task", "lsq", "--dim", "8", "--n", "100", "--clients", "5", "--rounds", "2", "--encoder",
                 "sqkr", "--out", str(tmp_path / "r")]) == 0
    assert "bits/client/round" in capsys.readouterr().out
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert {"test_accuracy", "distance_to_optimum"} & set(m["final"]) and m["final"]["bits_per_client"] == 4 * (5 + 1)
    with pytest.raises(SystemExit):
        main(["run", "--task", "lsq", "--rounds", "0", "--out", str(tmp_path / "x")])
    assert "positive integer" in capsys.readouterr().err and not (tmp_path / "x").exists()
    assert main(["run", "--task", "lsq", "--lr", "0", "--out", str(tmp_path / "x")]) == 2
    assert "positive" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_lsq_paper_regime_options(tmp_path):
    """``--lsq-theta-scale 1`` puts ‖θ₀ − θ*‖² near d (the paper's E2), the default near 1; a bad value
    is one line and exit 2."""
    from sstq_fl.fl.tasks import make_task

    paper = make_task("lsq", 0, dim=64, n=400, noise=1.0, theta_scale=1.0)
    ours = make_task("lsq", 0, dim=64, n=400)
    assert 40 < float((paper.theta_star**2).sum()) < 90 and 0.5 < float((ours.theta_star**2).sum()) < 1.6
    out = tmp_path / "p"
    assert main(["run", "--task", "lsq", "--dim", "8", "--n", "100", "--clients", "5", "--rounds", "2", "--encoder",
                 "clean", "--lsq-theta-scale", "1", "--lsq-noise", "1", "--out", str(out)]) == 0
    assert main(["run", "--task", "lsq", "--lsq-noise", "-1", "--out", str(tmp_path / "x")]) == 2
