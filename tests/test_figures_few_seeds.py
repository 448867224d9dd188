"""Figures that survive few seeds (synthetic results, no training): intervals clipped to the metric's range and
flagged under 3 seeds, ``--interval se`` drawing one standard error, a palette that keeps 12 series apart, labels
inside the figure, and one ETA for the progress bar and its log line."""

import io
import json
import logging
import math

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from sstq_fl import palette, plots
from sstq_fl import progress as prog
from sstq_fl.cli import main
from sstq_fl.experiments import figures
from sstq_fl.experiments.results import aggregate, checked_results, final_rows
from sstq_fl.experiments.spec import parse_experiment
from sstq_fl.intervals import Bands
from sstq_fl.io import atomic_write_json, finite_json

ACCURACY = {("sstq-flat:b=4", 0): 0.05, ("sstq-flat:b=4", 1): 0.95, ("sqkr", 0): 0.50, ("sqkr", 1): 0.52}
"""Final accuracies over 2 seeds: sstq-flat's raw 95 % t-interval is 0.5 ± 12.7 · 0.45, far outside [0, 1]."""


def rows() -> list[dict]:
    """A two-encoder, two-seed, three-round sweep's tidy rows (as :func:`cell_rows` writes them)."""
    out = []
    for (spec, seed), final in ACCURACY.items():
        head = {"cell": f"{spec}-{seed}", "task": "fmnist", "encoder": spec.split(":")[0], "encoder_params": "",
                "encoder_spec": spec, "encoder_privacy": "ε-LDP", "epsilon": 3.0, "b": 4, "seed": seed,
                "trust": "server", "threat_model": "identified"}
        out += [{**head, "round": t, "metric_name": "test_accuracy", "metric": final * t / 3, "bits_per_client": 20,
                 "train_loss": 1.0 / t, "epsilon_spent": 3.0 * t, "epsilon_central": None} for t in (1, 2, 3)]
    return out


def doc(interval: str = "t95") -> dict:
    aggs = aggregate(rows(), interval)
    return {"experiment": {"title": "few seeds"}, "interval": interval, "rows": rows(), "aggregates": aggs,
            "final": final_rows(aggs)}


def flat_final(d: dict) -> dict:
    return next(a for a in d["final"] if a["encoder_spec"] == "sstq-flat:b=4")


def test_a_two_seed_interval_past_zero_and_one_is_clipped_in_the_figure_and_flagged(tmp_path):
    a = flat_final(doc())
    assert a["interval"] == "t95" and a["metric_ci_low"] < -1 and a["metric_ci_high"] > 2  # the table keeps it raw
    b = Bands("t95", (0.0, 1.0))
    assert b(a) == (0.0, 1.0) and b.clipped and "2 seeds" in b.note() and "clipped" in b.note()
    fig = figures.plot_rounds(doc(), tmp_path / "rounds")
    ys = [v[1] for c in fig.axes[0].collections for p in c.get_paths() for v in p.vertices]
    assert ys and min(ys) >= 0.0 and max(ys) <= 1.0
    fig = figures.plot_bits(doc(), tmp_path / "bits")
    bars = [seg for c in fig.axes[0].collections for seg in c.get_segments()]
    assert bars and all(0.0 <= y <= 1.0 for seg in bars for _, y in seg)
    title = plots.figure_title(fig)
    assert "95 % Student-t interval over 2 seeds" in title and "⚠" in title and "clipped to the value's range [0, 1]" in title


def test_fewer_than_three_seeds_are_logged_as_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sstq_fl"):
        figures.plot_all(doc(), tmp_path)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "2 seeds" in r.getMessage()]
    assert len(warned) == 1 and "12.7" in warned[0].getMessage()


def test_interval_se_gives_half_widths_of_one_standard_error(tmp_path, capsys):
    a = flat_final(doc("se"))
    se = a["metric_sd"] / math.sqrt(2)
    assert a["interval"] == "se" and a["metric_ci_high"] - a["metric_mean"] == pytest.approx(se)
    assert Bands("se", (0.0, 1.0)).errors(a) == [[pytest.approx(se)], [pytest.approx(se)]]
    atomic_write_json(tmp_path / "results.json", finite_json(doc("t95")))
    assert main(["plot", str(tmp_path), "--interval", "se"]) == 0
    fig = figures.plot_bits(checked_results(json.loads((tmp_path / "results.json").read_text())), tmp_path / "b", "se")
    half = [abs(seg[1][1] - seg[0][1]) / 2 for c in fig.axes[0].collections for seg in c.get_segments()]
    assert pytest.approx(se) in half and "± 1 standard error" in plots.figure_title(fig)
    none = figures.plot_bits(doc(), tmp_path / "n", "none")
    assert not [c for c in none.axes[0].collections if c.get_segments()] and "⚠" not in plots.figure_title(none)


def test_results_written_before_the_interval_column_still_read():
    d = finite_json(doc())
    for a in d["aggregates"] + d["final"]:
        a.pop("interval")
    d.pop("interval")
    assert checked_results(d) is d


def test_the_experiment_file_sets_the_interval_from_the_declaration():
    assert parse_experiment(b'encoder = "clean"\n[experiment]\ninterval = "se"\n').interval == "se"
    with pytest.raises(ValueError, match=r"x.toml:3: \[experiment\] interval must be one of t95, se, none"):
        parse_experiment(b'encoder = "clean"\n[experiment]\ninterval = "sd"\n', "x.toml")


def test_the_palette_keeps_twelve_series_apart():
    looks = [palette.look(i) for i in range(12)]
    assert len({(s["color"], s["ls"]) for s in looks}) == 12
    assert len({(s["color"], s["marker"]) for s in looks}) == 12  # points (no line) stay apart too
    assert len({s["color"] for s in looks[:8]}) == 8 and all(s["color"] in palette.OKABE_ITO for s in looks)


def outside(fig) -> list[str]:
    """What of ``fig`` leaves the figure after a draw: every visible, non-empty text but tick labels (a tick outside
    the axis' view is never drawn), by its extent; the ticks' labels as part of the figure's tight box."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r, box = canvas.get_renderer(), fig.bbox
    ticks = {id(t) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for tick in axis.get_major_ticks() + axis.get_minor_ticks() for t in (tick.label1, tick.label2)}
    cut = []
    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip() and id(t) not in ticks:
            e = t.get_window_extent(r)
            if e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1:
                cut.append(t.get_text())
    tight, inches = fig.get_tightbbox(r), fig.bbox_inches
    if tight.x0 < -0.01 or tight.y0 < -0.01 or tight.x1 > inches.x1 + 0.01 or tight.y1 > inches.y1 + 0.01:
        cut.append(f"tight box {tight} past {inches}")
    return cut


def test_every_label_lies_inside_the_figure(tmp_path):
    rounds = [{"round": t, "train_loss": 2 / t, "test_accuracy": 0.1 * t, "epsilon_spent": 3.0 * t} for t in range(1, 9)]
    run = {"config": {"task": "fmnist", "encoder": "sstq-flat:b=4", "epsilon": 3.0, "clients": 100, "rounds": 8},
           "rounds": rounds, "final": {**rounds[-1], "bits_per_client": 20}}
    assert outside(plots.plot_run(run, tmp_path / "curves.png")) == []
    many = {f"sstq-flat:b={b}": {**run, "final": {**run["final"], "bits_per_client": b}} for b in range(1, 13)}
    assert outside(plots.plot_comparison(many, tmp_path / "comparison.png", run["config"])) == []
    assert outside(figures.plot_rounds(doc(), tmp_path / "rounds")) == []


def test_the_bar_and_the_log_line_show_one_eta(monkeypatch, caplog):
    from rich.console import Console

    clock = iter([0.0, 30.0, 30.0, 30.0, 30.0])
    monkeypatch.setattr(prog.time, "perf_counter", lambda: next(clock, 30.0))
    monkeypatch.setattr(prog, "_console", Console(file=io.StringIO(), force_terminal=True))
    with prog.progress(4, "cells", terminal=True) as p:
        p.advance()  # 1 of 4 steps in 30 s: 90 s left
        task = prog._live.tasks[0]
        column = next(c for c in prog._live.columns if getattr(c, "text_format", "") == "{task.fields[eta]}")
        shown = column.render(task).plain
        assert shown == "eta 0:01:30" and shown in p.line()
    clock = iter([0.0, 30.0, 30.0, 30.0])
    with caplog.at_level(logging.INFO, logger="sstq_fl"), prog.progress(4, "cells", terminal=False, every=1) as q:
        q.advance()
    assert "eta 0:01:30" in caplog.records[0].getMessage()
