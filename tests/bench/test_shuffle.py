"""``sstq-fl bench shuffle``: its tables, the E3 join and the figure, on small grids."""

from __future__ import annotations

import csv
import json

import pytest

from sstq_fl.bench import shuffle, shuffle_plot
from sstq_fl.cli import main
from sstq_fl.plots import figure_title


def test_rows_order_the_bounds(monkeypatch):
    rows = shuffle.per_round_rows(1e-5, (1.0, 3.0), (100, 1000))
    for r in rows:
        assert r["stronger_clone"] <= r["fmt21_numerical"] <= r["epsilon0"] + 1e-3
    assert rows[1]["stronger_clone"] < rows[0]["stronger_clone"]  # more messages, smaller epsilon
    rr = shuffle.rounds_rows(1e-5, 10, (3.0,), (100, 1000))
    assert rr[1]["central"] < rr[0]["central"] < rr[0]["local"] == pytest.approx(30, rel=0.01)


def test_report_joins_a_sweep_and_draws_it(tmp_path, monkeypatch):
    monkeypatch.setattr(shuffle, "EPSILONS0", (1.0, 3.0))
    monkeypatch.setattr(shuffle, "MESSAGES", (100, 1000))
    final = tmp_path / "final.csv"
    cols = ["encoder_spec", "epsilon", "metric_name", "metric_mean", "metric_ci_low", "metric_ci_high", "seeds",
            "epsilon_spent_mean"]
    with final.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerow(["sstq-flat:b=4", "1.0", "test_accuracy", "0.5", "0.4", "0.6", "3", "79.84"])
        w.writerow(["sstq-flat:b=4", "3.0", "test_accuracy", "0.6", "0.55", "0.65", "3", "300"])
        w.writerow(["sstq-flat:b=4", "3.0", "train_loss", "1.5", "1.4", "1.6", "3", "300"])
    out = tmp_path / "shuffle.json"
    assert main(["bench", "shuffle", "--rounds", "10", "--sweep", str(final), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    e3 = res["e3"]["rows"]
    assert len(e3) == 2 and all(r["central"] < r["local"] for r in e3)
    assert e3[1]["central"] == pytest.approx(shuffle.central_epsilon(3.0, 100, 10, 1e-5))
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_figure_names_what_made_it(tmp_path, monkeypatch):
    res = {"delta": 1e-5, "grid": 1e-4, "per_round": shuffle.per_round_rows(1e-5, (1.0,), (100, 300)),
           "rounds": shuffle.rounds_rows(1e-5, 5, (1.0,), (100,))}
    seen = {}
    monkeypatch.setattr(shuffle_plot, "save", lambda fig, path: seen.setdefault("title", figure_title(fig)))
    shuffle_plot.plot_shuffle(res, tmp_path / "x.png")
    assert "sstq-fl bench shuffle" in seen["title"] and "shuffler trusted" in seen["title"]


def test_a_shuffled_sweep_reports_its_ledgers_figure_and_the_reference_joins(tmp_path, monkeypatch):
    monkeypatch.setattr(shuffle, "EPSILONS0", (1.0,))
    monkeypatch.setattr(shuffle, "MESSAGES", (100,))
    cols = ["encoder_spec", "epsilon", "metric_name", "metric_mean", "metric_ci_low", "metric_ci_high", "seeds",
            "epsilon_spent_mean", "epsilon_central_mean"]
    final, ref = tmp_path / "final.csv", tmp_path / "ref.csv"
    with final.open("w", newline="") as f:
        csv.writer(f).writerows([cols, ["sqkr:b0=4", "1.0", "test_accuracy", "0.45", "0.4", "0.5", "3", "79.84", "5.754"]])
    with ref.open("w", newline="") as f:
        csv.writer(f).writerows([cols, ["clean", "3.0", "test_accuracy", "0.6", "", "", "1", "", "5.75"]])
    res = shuffle.shuffle_report(str(tmp_path / "s.json"), rounds=5, sweep=str(final), reference=str(ref))
    assert res["e3"]["rows"][0]["central"] == 5.754  # the runs' ledgers, not the plan
    r = res["e3"]["reference_rows"][0]
    assert r["central"] == 5.75 and r["ci_low"] == r["ci_high"] == 0.6 and "curator" in r["encoder"]
