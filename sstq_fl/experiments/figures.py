"""A sweep's figures, drawn from its ``results.json`` alone (``sstq-fl plot DIR`` redraws them).

- ``rounds``: the metric against the round, one line per group (mean over seeds) with its interval as a band;
- ``bits``: the final metric against bits per client (log axis), error bars the interval;
- ``epsilon``: the final metric against ε, one line per encoder setting (when ε is on the grid);
- ``trust``: the final metric against central ε and against bits per client, trust models side by side
  (when a cell has a trusted stage, :func:`plot_trust`).

Each as PNG and PDF, one panel per ε where ε is on the grid (up to :data:`MAX_PANELS`), titled with
the experiment's title and file.  The interval over seeds (:mod:`sstq_fl.intervals`: ``t95`` by default,
``se`` or ``none``) is named in each title, clipped to the metric's range
(:data:`sstq_fl.fl.engine.METRIC_RANGES`; a note says so) and flagged where it rests on fewer than 3 seeds
(logged, and noted under the title).  Series look as :func:`sstq_fl.palette.look` says.
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

from ..fl.engine import METRIC_RANGES
from ..intervals import NAMES as INTERVAL_NAMES
from ..intervals import Bands, warn_few_seeds
from ..io import atomic_write_bytes
from ..palette import LINES, look
from ..plots import finite, integer_ticks
from .results import LDP_LABEL, LOCAL_CENTRAL, central_epsilon

MAX_PANELS = 6
FIGURES = ("rounds", "bits", "epsilon", "trust")
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
    """A group's legend label: its ``[[cell]]`` name, else its encoder spec (with its privacy when it is not ε-LDP,
    e.g. ``non-private (compression only)``), and the grid values that vary (besides ``skip``)."""
    privacy = group.get("encoder_privacy", LDP_LABEL)
    spec = str(group.get("name") or "") or str(group["encoder_spec"]) + ("" if privacy == LDP_LABEL else f" — {privacy}")
    return ", ".join([spec] + [f"{c} {group[c]}" for c in cols if c not in skip])


def labels(rows: Sequence[dict[str, Any]], skip: Sequence[str]) -> list[str]:
    """Each row's legend label (:func:`label_of`): the values that vary between the rows (besides ``skip``), and
    for a named cell those that vary between the rows of its name."""
    cols = varying(rows, skip)
    out = []
    for a in rows:
        same = [r for r in rows if r.get("name") == a.get("name")] if a.get("name") else None
        out.append(label_of(a, cols if same is None else varying(same, skip)))
    return out


def varying(rows: Sequence[dict[str, Any]], skip: Sequence[str]) -> list[str]:
    """The group columns whose value differs between ``rows`` (besides the encoder columns and ``skip``)."""
    if not rows:
        return []
    cols = [c for c in rows[0] if c not in ("round", "seeds", "metric_name", "name", "threat_model", "interval")
            and not c.endswith(("_mean", "_sd", "_ci_low", "_ci_high"))
            and c not in ("encoder", "encoder_params", "encoder_spec", "encoder_privacy", "b", *skip)]
    return [c for c in cols if len({str(r[c]) for r in rows}) > 1]


def by_label(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``rows`` grouped by legend label (cell name or encoder spec, and the varying grid values besides ε)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for label, a in zip(labels(rows, ("epsilon",)), rows):
        groups.setdefault(label, []).append(a)
    return groups


def panels(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Rows split by ε where it varies (``[("ε 3", rows)]``), else one panel of all rows."""
    eps = sorted({float(r["epsilon"]) for r in rows})
    if len(eps) < 2:
        return [("", list(rows))]
    return [(f"ε = {e:g}", [r for r in rows if float(r["epsilon"]) == e]) for e in eps[:MAX_PANELS]]


def style(i: int) -> dict[str, Any]:
    """The ``i``-th group's colour, marker and line style (:func:`sstq_fl.palette.look`)."""
    return look(i)


def bands(doc: dict[str, Any], interval: str | None = None) -> Bands:
    """The figure's intervals over seeds: ``interval`` (default: the kind the tables hold, else ``t95``), clipped
    to the range of the doc's metric."""
    return Bands(interval or str(doc.get("interval") or "t95"), METRIC_RANGES.get(_metric(doc), (-math.inf, math.inf)))


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


def _note(fig: Figure, b: Bands) -> None:
    """The intervals' note (:meth:`~sstq_fl.intervals.Bands.note`) as a line under the figure's title."""
    if b.note():
        fig.suptitle(f"{fig.get_suptitle()}\n{b.note()}", fontsize=9)


def _over(b: Bands, doc: dict[str, Any]) -> str:
    """``mean and <interval> over <seeds>`` for a title."""
    return f"mean over {_seeds(doc)}" if b.kind == "none" else f"mean and {INTERVAL_NAMES[b.kind]} over {_seeds(doc)}"


def _legend(ax: Axes, single: bool) -> None:
    """The panel's legend: beside a single panel, inside each of several."""
    if single:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=6)


def _band(ax: Axes, members: list[dict[str, Any]], label: str, look: dict[str, Any], b: Bands) -> None:
    members = sorted(members, key=lambda a: a["round"])
    x = [a["round"] for a in members]
    ax.plot(x, finite([a.get("metric_mean") for a in members]), label=label, lw=1.3, color=look["color"], ls=look["ls"])
    low, high = (finite(list(v)) for v in zip(*(b(a) for a in members)))
    if any(not math.isnan(v) for v in low):
        ax.fill_between(x, low, high, color=look["color"], alpha=0.15, lw=0)


def plot_rounds(doc: dict[str, Any], base: Path, interval: str | None = None) -> Figure:
    """The metric against the round, per group, with its interval over seeds as a band (``interval``: see
    :func:`bands`)."""
    aggs, metric, b = doc["aggregates"], _metric(doc), bands(doc, interval)
    parts = panels(aggs)
    fig, axes = _figure(len(parts), f"{doc_title(doc)}: {LABELS.get(metric, metric)} per round ({_over(b, doc)})")
    for ax, (name, rows) in zip(axes, parts):
        for i, (label, members) in enumerate(by_label(rows).items()):
            _band(ax, members, label, style(i), b)
        ax.set(xlabel="round", ylabel=LABELS.get(metric, metric), title=name)
        _metric_scale(ax, metric)
        integer_ticks(ax)
        _legend(ax, len(parts) == 1)
    _note(fig, b)
    save_both(fig, base)
    return fig


def plot_bits(doc: dict[str, Any], base: Path, interval: str | None = None) -> Figure:
    """The final metric against bits per client (log axis), error bars the interval over seeds."""
    finals, metric, b = doc["final"], _metric(doc), bands(doc, interval)
    parts = panels(finals)
    fig, axes = _figure(len(parts), f"{doc_title(doc)}: final {LABELS.get(metric, metric)} against bits per client "
                                    f"({_over(b, doc)})")
    for ax, (name, rows) in zip(axes, parts):
        for i, (label, a) in enumerate(zip(labels(rows, ("epsilon",)), rows)):
            if a.get("metric_mean") is not None and a.get("bits_per_client_mean") is not None:
                _point(ax, float(a["bits_per_client_mean"]), a, label, style(i), b)
        ax.set_xscale("log")
        _plain_log_ticks(ax)
        _metric_scale(ax, metric)
        ax.set(xlabel="bits per client per round (log scale)", ylabel=f"final {LABELS.get(metric, metric)}", title=name)
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax, len(parts) == 1)
    _note(fig, b)
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


def _point(ax: Axes, x: float, a: dict[str, Any], label: str, look: dict[str, Any], b: Bands) -> None:
    ax.errorbar([x], [float(a["metric_mean"])], yerr=b.errors(a), fmt=look["marker"], color=look["color"], ms=5,
                capsize=3, label=label)


def _errors(members: Sequence[dict[str, Any]], b: Bands) -> list[list[float]] | None:
    """The rows' intervals as one ``yerr`` (None where no row has one; a row without one: no bar)."""
    errs = [b.errors(a) for a in members]
    if all(e is None for e in errs):
        return None
    return [[e[0][0] if e else 0.0 for e in errs], [e[1][0] if e else 0.0 for e in errs]]


def plot_epsilon(doc: dict[str, Any], base: Path, interval: str | None = None) -> Figure | None:
    """The final metric against ε, one line per encoder setting (None when ε is not on the grid)."""
    finals, metric, b = doc["final"], _metric(doc), bands(doc, interval)
    if len({float(a["epsilon"]) for a in finals}) < 2:
        return None
    fig, (ax,) = _figure(1, f"{doc_title(doc)}: final {LABELS.get(metric, metric)} against per-message ε "
                            f"({_over(b, doc)})")
    for i, (label, members) in enumerate(by_label(finals).items()):
        members.sort(key=lambda a: float(a["epsilon"]))
        x, y = [float(a["epsilon"]) for a in members], finite([a.get("metric_mean") for a in members])
        look = style(i)
        ax.errorbar(x, y, yerr=_errors(members, b), marker=look["marker"], ls=look["ls"],
                    color=look["color"], ms=4, capsize=2, label=label)
    ax.set(xlabel="per-message ε (log scale)", ylabel=f"final {LABELS.get(metric, metric)}", xscale="log")
    eps = sorted({float(a["epsilon"]) for a in finals})
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.xaxis.set_minor_formatter(NullFormatter())
    _metric_scale(ax, metric)
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax, True)
    _note(fig, b)
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


def plot_all(doc: dict[str, Any], out: Path, interval: str | None = None) -> list[Path]:
    """Every figure of a sweep into ``out`` (PNG and PDF), intervals of kind ``interval`` (default: the tables');
    return the files written.  An interval over fewer than 3 seeds is logged as a warning (once)."""
    if not doc.get("rows"):
        return []
    b = bands(doc, interval)
    warn_few_seeds(b.kind, {int(a.get("seeds") or 0) for a in doc["final"]}, f"{doc_title(doc)} figures")
    plot_rounds(doc, out / "rounds", b.kind)
    plot_bits(doc, out / "bits", b.kind)
    names = ["rounds", "bits"] + (["epsilon"] if plot_epsilon(doc, out / "epsilon", b.kind) is not None else [])
    names += ["trust"] if plot_trust(doc, out / "trust", b.kind) is not None else []
    return [out / f"{n}.{fmt}" for n in names for fmt in ("png", "pdf")]


# ----------------------------------------------------------------------------- trust models side by side
MAX_TICKS = 8
"""The most central ε (or bits) values the ``trust`` figure labels one by one (more: the log axis's own ticks)."""
CENTRAL_AXES = ("epsilon", "central-epsilon", "central_epsilon", "trust", "name")
"""The group columns a ``trust`` line runs across (or names itself by): the rest tell its lines apart."""


def spread(xs: Sequence[float], factor: float = 1.5) -> list[float]:
    """The ascending positive values ``xs`` thinned so that each kept one is at least ``factor`` times the last kept,
    and at least an eighth of their span apart on a log axis (tick labels that do not overlap)."""
    out: list[float] = []
    step = max(factor, (xs[-1] / xs[0]) ** (1 / MAX_TICKS)) if xs else factor
    for x in xs:
        if not out or x >= step * out[-1]:
            out.append(x)
    return out


def trust_lines(finals: Sequence[dict[str, Any]]) -> list[tuple[str, int, list[dict[str, Any]]]]:
    """The final rows as the ``trust`` figure's lines: one per trust model and encoder (and any other grid value
    that varies, besides ε, the curator's ``central-epsilon`` and the cell name), in first-seen order; each
    ``(trust, index of the line within its trust, rows)``."""
    cols = varying(finals, CENTRAL_AXES)
    lines: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for a in finals:
        lines.setdefault((str(a.get("trust")), str(a["encoder_spec"]), *(str(a[c]) for c in cols)), []).append(a)
    seen: dict[str, int] = {}
    out = []
    for key, members in lines.items():
        out.append((key[0], seen.get(key[0], 0), members))
        seen[key[0]] = seen.get(key[0], 0) + 1
    return out


def trust_label(trust: str, members: list[dict[str, Any]], cols: Sequence[str], mixed_seeds: bool,
                named: dict[str, list[dict[str, Any]]]) -> str:
    """A ``trust`` line's legend label: ``trust: `` and its cell name (when its rows share one: with the grid values
    that vary between the rows of that name, ``named``) or encoder spec and the grid values that set it apart,
    ``ε: local, composed †`` without a trusted stage, and ``1 seed`` where seeds differ between lines and it has
    one."""
    names = {str(a.get("name") or "") for a in members}
    first = members[0]
    name = names.pop() if len(names) == 1 else ""
    head = label_of({**first, "name": name}, varying(named.get(name, []), CENTRAL_AXES) if name else cols)
    centrals = [central_epsilon(a) for a in members]
    local = any(what == LOCAL_CENTRAL for _, what in centrals)
    level = all(x is None or not math.isfinite(x) for x, _ in centrals)
    ones = mixed_seeds and all(int(a.get("seeds") or 0) == 1 for a in members)
    return (f"{trust}: {head}" + (" (ε = ∞: dotted level)" if level else " (ε: local, composed †)" if local else "")
            + (" (1 seed)" if ones else ""))


def plot_trust(doc: dict[str, Any], base: Path, interval: str | None = None) -> Figure | None:
    """The final metric against central ε (left, log axis) and against bits per client per round (right, log axis),
    trust models side by side: one colour and marker per trust model, one line per trust model and encoder across
    its central ε values, error bars the interval over seeds (plain points for one seed).  Central ε is the
    trusted stage's ledger, or for a run without one (``trust = "server"``) its local ε composed over the rounds
    (a footnote says so); a non-private run without a trusted stage (ε = ∞) is a dotted level on the left.  None
    when no cell has a trusted stage (or the table predates the ``trust`` column)."""
    finals, metric, b = doc["final"], _metric(doc), bands(doc, interval)
    trusts = list(dict.fromkeys(str(a["trust"]) for a in finals if a.get("trust") is not None))
    if not trusts or not set(trusts) - {"server"}:
        return None
    seeds = {int(a.get("seeds") or 0) for a in finals}
    tasks = ", ".join(dict.fromkeys(str(a.get("task")) for a in finals if a.get("task") is not None))
    kind = "plain points, no interval" if seeds == {1} or b.kind == "none" else f"mean and {INTERVAL_NAMES[b.kind]}"
    name = LABELS.get(metric, metric)
    title = (f"{doc_title(doc)}: final {name} against central ε and against bits per client, by trust model; "
             f"task {tasks}, {_seeds(doc)} ({kind})")
    lines = trust_lines(finals)
    local = any(central_epsilon(a)[1] == LOCAL_CENTRAL for _, _, m in lines for a in m)
    if local:
        title += ("\n† trust = server (no trusted stage): the central ε against the server is the local ε composed over "
                  "the rounds (the run's ε spent)")
    fig = Figure(figsize=(13.0, 6.0 + 0.2 * math.ceil(len(lines) / 3)), layout="constrained")
    ax_eps, ax_bits = fig.subplots(1, 2)
    fig.suptitle(textwrap.fill(title.split("\n")[0], 150) + ("\n" + title.split("\n")[1] if local else ""), fontsize=9)
    cols = varying(finals, CENTRAL_AXES)
    mixed = len(seeds) > 1
    named: dict[str, list[dict[str, Any]]] = {}
    for a in finals:
        if a.get("name"):
            named.setdefault(str(a["name"]), []).append(a)
    for trust, j, members in lines:
        i = trusts.index(trust) if trust in trusts else len(trusts)
        shape = {**look(i), "ls": LINES[j % len(LINES)], "mfc": "white" if j % 2 else None}
        label = trust_label(trust, members, cols, mixed, named)
        _trust_line(ax_eps, members, label, shape, b)
        for a in members:
            if _finite(a.get("metric_mean")) and _finite(a.get("bits_per_client_mean")):
                ax_bits.errorbar([float(a["bits_per_client_mean"])], [float(a["metric_mean"])], yerr=b.errors(a),
                                 fmt=shape["marker"], color=shape["color"], mfc=shape["mfc"], ms=5, capsize=3,
                                 label="_nolegend_")
    ax_eps.set(xlabel="central ε (log scale; † local ε composed)" if local else "central ε (log scale)",
               ylabel=f"final {name}", xscale="log")
    ax_bits.set(xlabel="bits per client per round (log scale)", ylabel=f"final {name}", xscale="log")
    for ax in (ax_eps, ax_bits):
        _plain_log_ticks(ax)
        _metric_scale(ax, metric)
        ax.grid(True, which="both", alpha=0.3)
    eps: list[Any] = [central_epsilon(a)[0] for a in finals]
    bits: list[Any] = [a.get("bits_per_client_mean") for a in finals]
    for ax, values in ((ax_eps, eps), (ax_bits, bits)):
        xs = spread(sorted({round(float(x), 12) for x in values if _finite(x) and float(x) > 0}))
        if 0 < len(xs) <= MAX_TICKS:
            ax.set_xticks(xs, [f"{x:.3g}" for x in xs])
            ax.xaxis.set_minor_formatter(NullFormatter())
    handles, names = ax_eps.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=min(3, max(1, len(names))), fontsize=7)
    _note(fig, b)
    save_both(fig, base)
    return fig


def _trust_line(ax: Axes, members: list[dict[str, Any]], label: str, look: dict[str, Any], b: Bands) -> None:
    """One ``trust`` line on the central-ε panel: its finite central ε values joined (error bars where there
    are intervals), and each member without a central ε (a non-private run) as a dotted level."""
    pts = sorted(((central_epsilon(a)[0], a) for a in members if _finite(a.get("metric_mean"))),
                 key=lambda p: math.inf if p[0] is None else p[0])
    finite_pts = [(float(x), a) for x, a in pts if x is not None and math.isfinite(x) and x > 0]
    if finite_pts:
        xs = [p[0] for p in finite_pts]
        y = [float(a["metric_mean"]) for _, a in finite_pts]
        ax.errorbar(xs, y, yerr=_errors([a for _, a in finite_pts], b), marker=look["marker"], ls=look["ls"],
                    color=look["color"], mfc=look["mfc"], ms=5, capsize=3, label=label)
        label = "_nolegend_"
    for x, a in pts:
        if x is None or not math.isfinite(x):
            ax.axhline(float(a["metric_mean"]), color=look["color"], ls=":", lw=1.2, label=label)
            label = "_nolegend_"


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
