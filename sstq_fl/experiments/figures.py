"""A sweep's figures, drawn from its ``results.json`` alone (``sstq-fl plot DIR`` redraws them).

- ``rounds``: the metric against the round, one line per group (mean over seeds) with its 95 % band;
- ``bits``: the final metric against bits per client (log axis), error bars the 95 % interval;
- ``epsilon``: the final metric against ε, one line per encoder setting (when ε is on the grid).

Each as PNG and PDF, one panel per ε where ε is on the grid (up to :data:`MAX_PANELS`), titled with
the experiment's title and file.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from ..io import atomic_write_bytes
from ..plots import finite, integer_ticks
from .results import LDP_LABEL

MAX_PANELS = 6
FIGURES = ("rounds", "bits", "epsilon")
LABELS = {"test_accuracy": "test accuracy", "test_metric": "test metric", "test_loss": "test loss",
          "distance_to_optimum": "‖θ − θ*‖² (distance to optimum)"}


def save_both(fig: Figure, base: Path) -> list[Path]:
    """Write ``fig`` as ``base.png`` and ``base.pdf``, atomically; return the paths."""
    paths = []
    for fmt in ("png", "pdf"):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=110)
        atomic_write_bytes(base.with_suffix("." + fmt), buf.getvalue())
        paths.append(base.with_suffix("." + fmt))
    return paths


def label_of(group: dict[str, Any], cols: Sequence[str], skip: Sequence[str] = ()) -> str:
    """A group's legend label: its encoder spec (with its privacy when it is not ε-LDP, e.g. ``non-private
    (compression only)``) and the grid values that vary (besides ``skip``)."""
    privacy = group.get("encoder_privacy", LDP_LABEL)
    spec = str(group["encoder_spec"]) + ("" if privacy == LDP_LABEL else f" — {privacy}")
    return ", ".join([spec] + [f"{c} {group[c]}" for c in cols if c not in skip])


def varying(rows: Sequence[dict[str, Any]], skip: Sequence[str]) -> list[str]:
    """The group columns whose value differs between ``rows`` (besides the encoder columns and ``skip``)."""
    if not rows:
        return []
    cols = [c for c in rows[0] if c not in ("round", "seeds", "metric_name") and not c.endswith(
        ("_mean", "_sd", "_ci_low", "_ci_high")) and c not in ("encoder", "encoder_params", "encoder_spec",
                                                               "encoder_privacy", "b", *skip)]
    return [c for c in cols if len({str(r[c]) for r in rows}) > 1]


def by_label(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``rows`` grouped by legend label (encoder spec and the varying grid values besides ε)."""
    cols = varying(rows, ("epsilon",))
    groups: dict[str, list[dict[str, Any]]] = {}
    for a in rows:
        groups.setdefault(label_of(a, cols), []).append(a)
    return groups


def panels(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Rows split by ε where it varies (``[("ε 3", rows)]``), else one panel of all rows."""
    eps = sorted({float(r["epsilon"]) for r in rows})
    if len(eps) < 2:
        return [("", list(rows))]
    return [(f"ε = {e:g}", [r for r in rows if float(r["epsilon"]) == e]) for e in eps[:MAX_PANELS]]


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
LINES = ("-", "--", "-.", ":")


def style(i: int) -> dict[str, Any]:
    """The ``i``-th group's colour (20 distinct), marker and line style."""
    from matplotlib import colormaps

    return {"color": colormaps["tab20"](i % 20), "marker": MARKERS[i % len(MARKERS)], "ls": LINES[(i // 20) % 4]}


def _figure(n: int, title: str) -> tuple[Figure, list[Axes]]:
    """``n`` panels (up to 3 a row; one panel drawn wide, its legend beside it) under a wrapped title."""
    cols = min(n, 3)
    width = 5.2 * cols if n > 1 else 10.0
    fig = Figure(figsize=(width, 4.4 * math.ceil(n / cols) + 0.8), layout="constrained")
    axes = list(fig.subplots(math.ceil(n / cols), cols, squeeze=False).ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(textwrap.fill(title, int(width * 15)), fontsize=9)
    return fig, axes[:n]


def _legend(ax: Axes, single: bool) -> None:
    """The panel's legend: beside a single panel, inside each of several."""
    if single:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=6)


def _band(ax: Axes, members: list[dict[str, Any]], label: str, look: dict[str, Any]) -> None:
    members = sorted(members, key=lambda a: a["round"])
    x = [a["round"] for a in members]
    ax.plot(x, finite([a.get("metric_mean") for a in members]), label=label, lw=1.3, color=look["color"], ls=look["ls"])
    low, high = finite([a.get("metric_ci_low") for a in members]), finite([a.get("metric_ci_high") for a in members])
    if any(not math.isnan(v) for v in low):
        ax.fill_between(x, low, high, color=look["color"], alpha=0.15, lw=0)


def plot_rounds(doc: dict[str, Any], base: Path) -> Figure:
    """The metric against the round, per group, with 95 % bands over seeds."""
    aggs, metric = doc["aggregates"], _metric(doc)
    parts = panels(aggs)
    fig, axes = _figure(len(parts), f"{doc_title(doc)}: {LABELS.get(metric, metric)} per round "
                                    f"(mean and 95 % interval over {_seeds(doc)})")
    for ax, (name, rows) in zip(axes, parts):
        for i, (label, members) in enumerate(by_label(rows).items()):
            _band(ax, members, label, style(i))
        ax.set(xlabel="round", ylabel=LABELS.get(metric, metric), title=name)
        _metric_scale(ax, metric)
        integer_ticks(ax)
        _legend(ax, len(parts) == 1)
    save_both(fig, base)
    return fig


def plot_bits(doc: dict[str, Any], base: Path) -> Figure:
    """The final metric against bits per client (log axis), error bars the 95 % interval over seeds."""
    finals, metric = doc["final"], _metric(doc)
    parts = panels(finals)
    fig, axes = _figure(len(parts), f"{doc_title(doc)}: final {LABELS.get(metric, metric)} against bits per client "
                                    f"(mean and 95 % interval over {_seeds(doc)})")
    for ax, (name, rows) in zip(axes, parts):
        cols = varying(rows, ("epsilon",))
        for i, a in enumerate(rows):
            if a.get("metric_mean") is not None and a.get("bits_per_client_mean") is not None:
                _point(ax, float(a["bits_per_client_mean"]), a, label_of(a, cols), style(i))
        ax.set_xscale("log")
        _plain_log_ticks(ax)
        _metric_scale(ax, metric)
        ax.set(xlabel="bits per client per round (log scale)", ylabel=f"final {LABELS.get(metric, metric)}", title=name)
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax, len(parts) == 1)
    save_both(fig, base)
    return fig


def _plain_log_ticks(ax: Axes) -> None:
    """A log x axis labelled in plain numbers (``20``, not ``2×10¹``); minor ticks labelled too when the
    axis spans less than a decade (else they would crowd it)."""
    ax.autoscale_view()
    low, high = ax.get_xlim()
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain if high / max(low, 1e-300) < 10 else NullFormatter())


def _metric_scale(ax: Axes, metric: str) -> None:
    """A log axis for least squares' distance to the optimum (it spans decades), else linear."""
    if metric == "distance_to_optimum":
        ax.set_yscale("log")


def _point(ax: Axes, x: float, a: dict[str, Any], label: str, look: dict[str, Any]) -> None:
    mean, low, high = float(a["metric_mean"]), a.get("metric_ci_low"), a.get("metric_ci_high")
    err = None if low is None or high is None else [[mean - float(low)], [float(high) - mean]]
    ax.errorbar([x], [mean], yerr=err, fmt=look["marker"], color=look["color"], ms=5, capsize=3, label=label)


def plot_epsilon(doc: dict[str, Any], base: Path) -> Figure | None:
    """The final metric against ε, one line per encoder setting (None when ε is not on the grid)."""
    finals, metric = doc["final"], _metric(doc)
    if len({float(a["epsilon"]) for a in finals}) < 2:
        return None
    fig, (ax,) = _figure(1, f"{doc_title(doc)}: final {LABELS.get(metric, metric)} against per-message ε "
                            f"(mean and 95 % interval over {_seeds(doc)})")
    for i, (label, members) in enumerate(by_label(finals).items()):
        members.sort(key=lambda a: float(a["epsilon"]))
        x, y = [float(a["epsilon"]) for a in members], finite([a.get("metric_mean") for a in members])
        low, high = finite([a.get("metric_ci_low") for a in members]), finite([a.get("metric_ci_high") for a in members])
        err = [[m - lo for m, lo in zip(y, low)], [h - m for m, h in zip(y, high)]]
        look = style(i)
        ax.errorbar(x, y, yerr=None if all(math.isnan(v) for v in low) else err, marker=look["marker"], ls=look["ls"],
                    color=look["color"], ms=4, capsize=2, label=label)
    ax.set(xlabel="per-message ε (log scale)", ylabel=f"final {LABELS.get(metric, metric)}", xscale="log")
    eps = sorted({float(a["epsilon"]) for a in finals})
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.xaxis.set_minor_formatter(NullFormatter())
    _metric_scale(ax, metric)
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax, True)
    save_both(fig, base)
    return fig


def _metric(doc: dict[str, Any]) -> str:
    return str(doc["aggregates"][0]["metric_name"]) if doc["aggregates"] else "test_accuracy"


def _seeds(doc: dict[str, Any]) -> str:
    n = sorted({int(a["seeds"]) for a in doc["final"]}) or [0]
    return f"{n[0]} seed{'s' if n[0] != 1 else ''}" if len(n) == 1 else f"{n[0]}–{n[-1]} seeds"


def doc_title(doc: dict[str, Any]) -> str:
    """The experiment's title and file, for a figure title."""
    exp = doc.get("experiment") or {}
    file = Path(str(exp.get("file"))).name if exp.get("file") else ""
    name = str(exp.get("title") or file or "sweep")
    return f"{name} ({file})" if file and file != name else name


def plot_all(doc: dict[str, Any], out: Path) -> list[Path]:
    """Every figure of a sweep into ``out`` (PNG and PDF); return the files written."""
    if not doc.get("rows"):
        return []
    plot_rounds(doc, out / "rounds")
    plot_bits(doc, out / "bits")
    names = ["rounds", "bits"] + (["epsilon"] if plot_epsilon(doc, out / "epsilon") is not None else [])
    return [out / f"{n}.{fmt}" for n in names for fmt in ("png", "pdf")]
