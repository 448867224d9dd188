"""Figures (sstq_fl.plots): titles that say what produced them, integer round ticks, ε spent,
distinct labels per encoder spec, the DP sweep's reference lines and a large labelled sample grid."""

import math

import numpy as np
import torch
from matplotlib.image import imread

from sstq_fl import plots
from sstq_fl.gen.evaluation import save_sample_grid
from sstq_fl.plots import plot_sample_grid

CONFIG = {"task": "lsq", "encoder": "sstq-flat:b=4", "clients": 12, "rounds": 7, "epsilon": 3.0, "engine": "vectorized",
          "randomness": "secure"}


def metrics(encoder: str = "sstq-flat:b=4", eps: float = 3.0, bits: int = 10) -> dict:
    rounds = [{"round": t, "train_loss": 1 / t, "distance_to_optimum": 2 / t, "epsilon_spent": eps * t} for t in range(1, 8)]
    return {"config": {**CONFIG, "encoder": encoder}, "rounds": rounds,
            "final": {"distance_to_optimum": 2 / 7, "bits_per_client": bits, "train_loss": 1 / 7}}


def integer_labels(ax) -> list[float]:
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    return ticks


def test_plot_run_writes_a_titled_png_with_integer_rounds_and_epsilon_spent(tmp_path):
    fig = plots.plot_run(metrics(), tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    title = plots.figure_title(fig)
    for fact in ("task lsq", "sstq-flat:b=4", "ε 3", "clients 12", "rounds 7", "randomness secure"):
        assert fact in title.replace("\n", " "), fact
    axes = fig.get_axes()
    for ax in axes:
        integer_labels(ax)
    eps = axes[2]
    assert "ε spent" in eps.get_ylabel() and list(eps.get_lines()[0].get_ydata()) == [3.0 * t for t in range(1, 8)]


def test_an_infinite_epsilon_is_labelled_not_plotted(tmp_path):
    fig = plots.plot_run(metrics("clean", math.inf), tmp_path / "c.png")
    line = fig.get_axes()[2].get_lines()[0]
    assert np.isnan(line.get_ydata()).all() and line.get_label() == "clean (ε = ∞)"


def test_comparison_labels_differ_for_two_specs_of_one_encoder(tmp_path):
    specs = ["sstq-flat:b=4", "sstq-flat:b=4,codebook=optimized", "clean"]
    results = {s: metrics(s, math.inf if s == "clean" else 3.0, 32 * 16 if s == "clean" else 10) for s in specs}
    fig = plots.plot_comparison(results, tmp_path / "comparison.png", CONFIG)
    assert (tmp_path / "comparison.png").stat().st_size > 1000
    axes = fig.get_axes()
    legend = [t.get_text() for t in axes[1].get_legend().get_texts()]
    assert len(set(legend)) == 3 and legend[0].startswith("sstq-flat:b=4 ") and "codebook=optimized" in legend[1]
    notes = [t.get_text() for t in axes[3].texts]
    assert notes == specs
    assert [ln.get_label() for ln in axes[2].get_lines()][-1] == "clean (512 b) (ε = ∞)"
    for ax in axes[:3]:
        integer_labels(ax)
    title = plots.figure_title(fig).replace("\n", " ")
    assert all(f in title for f in ("task lsq", "ε 3", "clients 12", "rounds 7", "sstq-flat:b=4,codebook=optimized"))


def test_mse_plot_is_titled_with_its_parameters(tmp_path):
    rows = [{"encoder": e, "d": d, "mse": 1.0 * d, "ci_low": 0.9 * d, "ci_high": 1.1 * d, "bits_per_message": 9}
            for e in ("sstq-flat:codebook=uniform", "sstq-flat:codebook=optimized") for d in (100, 1000)]
    fig = plots.plot_mse({"epsilon": 3.0, "bits": 8, "norm": 0.2, "trials": 50, "rows": rows}, tmp_path / "e1.png")
    title = plots.figure_title(fig).replace("\n", " ")
    assert "ε 3" in title and "trials 50" in title and "b 8" in title
    assert len({t.get_text() for t in fig.get_axes()[0].get_legend().get_texts()}) == 2


def test_dp_sweep_plot_has_reference_lines(tmp_path):
    def row(ref, eps, acc, fd):
        return {"reference": ref, "epsilon": eps, "downstream_accuracy": acc, "domain_fd": fd}

    rows = [row("dp", 1.0, 0.5, 200.0), row("dp", 0.2, 0.2, 900.0), row("non-private (epsilon = inf: ...)", None, 0.7, 100.0),
            row("public-only (zero information: ...)", 0.0, 0.1, 600.0)]
    fig = plots.plot_dp_sweep(rows, tmp_path / "sweep.png", {"profile": "cpu", "records": 2000, "delta": 1e-5})
    acc, fd = fig.get_axes()
    assert list(acc.get_lines()[0].get_xdata()) == [0.2, 1.0]
    assert [ln.get_label() for ln in acc.get_lines()[1:]] == ["non-private (ε = ∞)", "public-only (ε = 0)"]
    assert [ln.get_ydata()[0] for ln in fd.get_lines()[1:]] == [100.0, 600.0]
    assert "DP-MEPF ε sweep: profile cpu, records 2000, δ 1e-05" in plots.figure_title(fig)


def test_sample_grid_is_large_labelled_and_titled(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "plot_sample_grid", lambda *a: drawn.append(plot_sample_grid(*a)) or drawn[-1])
    x, y = torch.rand(60, 1, 28, 28), torch.arange(60) % 10
    path = save_sample_grid(x, y, tmp_path / "samples.png", pipeline="dp-mepf", epsilon=math.inf, detail="4 clients")
    img = imread(path)
    assert img.shape[1] >= 800 and img.shape[0] >= 800
    assert [ax.get_ylabel() for ax in drawn[0].get_axes()] == [str(c) for c in range(10)]
    assert plots.figure_title(drawn[0]) == "dp-mepf samples, one row per class: ε ∞, 4 clients"
    assert [p.name for p in tmp_path.iterdir()] == ["samples.png"]
