"""Every figure sstq-fl writes: one run's curves, a comparison, E1's MSE against dimension, a DP-MEPF
sample grid and a DP-MEPF ε sweep.

Each figure's title says what produced it (:func:`title`: task, encoder spec(s), ε, clients,
rounds, randomness mode, ...); round axes have integer ticks (:func:`integer_ticks`); long axis labels are
wrapped to the axis (:func:`axis_label`); every series looks as :func:`sstq_fl.palette.look` says; every plot
function returns its :class:`~matplotlib.figure.Figure` (closed to drawing, still readable) after
writing the PNG atomically.  Figures are made without pyplot, so no global backend is switched.
"""

from __future__ import annotations

import io
import math
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullFormatter

from .io import atomic_write_bytes
from .palette import look

PathLike = str | os.PathLike[str]
SPEC_FACTS = ("task", "encoder", "epsilon", "clients", "rounds", "engine", "randomness", "trust")
NAMES = {"epsilon": "ε", "delta": "δ"}


def fmt_value(v: Any) -> str:
    """A fact's value as text: floats to 4 significant digits, ∞ for an infinite one."""
    if isinstance(v, float):
        return "∞" if math.isinf(v) and v > 0 else f"{v:.4g}"
    return str(v)


def title(what: str, facts: Mapping[str, Any], *extra: str, width: int = 110) -> str:
    """``what: k v, k v, ..., extra`` (``epsilon`` written ε, ``delta`` δ; None values and empty extras left out),
    wrapped at ``width``."""
    parts = [f"{NAMES.get(k, k)} {fmt_value(v)}" for k, v in facts.items() if v is not None] + [e for e in extra if e]
    return "\n".join(textwrap.wrap(f"{what}: " + ", ".join(parts), width)) if parts else what


def run_facts(config: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The facts of a run config worth a title (``keys``, default :data:`SPEC_FACTS`; randomness defaults to
    reproducible, the mode of runs recorded before it was)."""
    facts = {k: config.get(k) for k in (keys or SPEC_FACTS)}
    if "randomness" in facts and facts["randomness"] is None:
        facts["randomness"] = "reproducible"
    return facts


def axis_label(text: str, width: int = 34) -> str:
    """An axis label wrapped at ``width`` characters, so a long one fits beside a short axis instead of being cut."""
    return "\n".join(textwrap.wrap(text, width)) or text


def integer_ticks(ax: Axes) -> None:
    """Integer ticks on ``ax``'s x axis (rounds, steps)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def finite(values: Sequence[Any]) -> list[float]:
    """``values`` as floats, with None and ±∞ as NaN (matplotlib leaves a gap)."""
    return [float(v) if v is not None and math.isfinite(float(v)) else math.nan for v in values]


def save(fig: Figure, path: PathLike, dpi: int = 110) -> Figure:
    """Write ``fig`` to ``path`` atomically, as a PDF if its suffix is ``.pdf``, else as a PNG, and return it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="pdf" if str(path).endswith(".pdf") else "png", dpi=dpi)
    atomic_write_bytes(path, buf.getvalue())
    return fig


def figure_title(fig: Figure) -> str:
    """The text of ``fig``'s overall title ("" without one)."""
    return str(fig.get_suptitle())


# ----------------------------------------------------------------------------- training runs
def _round_panels(ax: Sequence[Axes], rounds: list[dict[str, Any]], key: str, label: str, i: int = 0,
                  no_epsilon: str = "ε = ∞") -> None:
    """Training loss, ``key`` and ε spent against the round on ``ax[0..2]`` in the ``i``-th series' look
    (:func:`~sstq_fl.palette.look`; markers every few rounds); ``no_epsilon``: the ε line's note when no ε is
    finite; a trusted stage's central ε dotted."""
    t = [x["round"] for x in rounds]
    kw = {"color": look(i)["color"], "ls": look(i)["ls"], "marker": look(i)["marker"], "ms": 4,
          "markevery": max(1, len(t) // 8)}
    ax[0].plot(t, finite([x.get("train_loss") for x in rounds]), label=label, **kw)
    ax[1].plot(t, finite([x.get(key) for x in rounds]), label=label, **kw)
    eps = finite([x.get("epsilon_spent") for x in rounds])
    ax[2].plot(t, eps, label=label if any(map(math.isfinite, eps)) else f"{label} ({no_epsilon})", **kw)
    if any("epsilon_central" in x for x in rounds):
        ax[2].plot(t, finite([x.get("epsilon_central") for x in rounds]), **{**kw, "ls": ":"},
                   label=f"{label}: central (trusted stage: see the title)")


def _label_round_axes(ax: Sequence[Axes], key: str) -> None:
    """Axis names, integer round ticks and log scales of the three per-round panels."""
    ax[0].set(ylabel=axis_label("training loss (non-private diagnostic; not published in secure mode)"))
    ax[1].set(ylabel=axis_label(key.replace("_", " ")))
    ax[2].set(ylabel=axis_label("ε spent (cumulative; local, against the server)"))
    for a in ax[:3]:
        a.set_xlabel("round")
        integer_ticks(a)
        a.grid(True, alpha=0.3)
    if key == "distance_to_optimum":
        ax[1].set_yscale("log")


def metric_key(m: Mapping[str, Any]) -> str:
    """``test_accuracy`` where a run has it, else a user task's ``test_metric`` or ``test_loss``, else
    ``distance_to_optimum`` (least squares)."""
    last = m["final"] if "final" in m else m["rounds"][-1]
    return next((k for k in ("test_accuracy", "test_metric", "test_loss") if k in last), "distance_to_optimum")


def plot_run(metrics: dict[str, Any], path: PathLike) -> Figure:
    """One run's ``curves.png``: training loss, accuracy (or distance to θ*) and ε spent per round."""
    fig = Figure(figsize=(15, 4.4), layout="constrained")
    ax = fig.subplots(1, 3)
    key, c = metric_key(metrics), metrics["config"]
    _round_panels(ax, metrics["rounds"], key, c["encoder"])
    _label_round_axes(ax, key)
    ax[2].legend(fontsize=8)
    fig.suptitle(title("sstq-fl run", run_facts(c)))
    return save(fig, path)


def spec_label(spec: str, m: Mapping[str, Any]) -> str:
    """An encoder's legend label: its full spec (so two variants of one encoder differ) and its bits."""
    return f"{spec} ({m['final']['bits_per_client']} b)"


def plot_comparison(results: Mapping[str, dict[str, Any]], path: PathLike, config: Mapping[str, Any],
                    privacy: Mapping[str, str] | None = None) -> Figure:
    """``comparison.png``: loss, accuracy (or distance) and ε spent per round for every encoder, and the
    final metric against bits per client; one colour and one label per full encoder spec.  ``privacy``: the
    label of a non-private spec's ε line (e.g. ``non-private (compression only)``; default ``ε = ∞``)."""
    fig = Figure(figsize=(20, 4.8), layout="constrained")
    ax = fig.subplots(1, 4)
    key = metric_key(next(iter(results.values())))
    for i, (spec, m) in enumerate(results.items()):
        label = spec_label(spec, m)
        _round_panels(ax, m["rounds"], key, label, i, (privacy or {}).get(spec, "ε = ∞"))
        bits, final = m["final"]["bits_per_client"], m["final"].get(key)
        if final is not None:  # absent: a secure run of a task whose metric uses the pooled data
            ax[3].scatter([bits], [float(final)], color=look(i)["color"], marker=look(i)["marker"], label=label)
            ax[3].annotate(spec, (bits, float(final)), fontsize=7, xytext=(3, 3), textcoords="offset points")
    _label_round_axes(ax, key)
    ax[0].set_yscale("log")
    ax[3].set(xlabel="bits per client per round", ylabel=axis_label(f"final {key.replace('_', ' ')}"), xscale="log")
    if key == "distance_to_optimum":
        ax[3].set_yscale("log")
    ax[3].grid(True, which="both", alpha=0.3)
    ax[1].legend(fontsize=7)
    ax[2].legend(fontsize=7)
    facts = {**run_facts(config), "encoder": None, "encoders": ", ".join(results)}
    fig.suptitle(title("sstq-fl compare", facts, width=160))
    return save(fig, path)


# ----------------------------------------------------------------------------- E1
def plot_mse(result: dict[str, Any], path: PathLike) -> Figure:
    """E1's ``e1.png``: ``E‖ĝ − g‖²`` against the dimension per encoder spec, with 95 % intervals; a non-private
    encoder's label says so (its ``encoder_privacy``, e.g. ``non-private (compression only)``), as the title's ε is
    not its own."""
    fig = Figure(figsize=(7.5, 5.5), layout="constrained")
    ax = fig.subplots()
    for i, label in enumerate(dict.fromkeys(r["encoder"] for r in result["rows"])):
        rs = [r for r in result["rows"] if r["encoder"] == label]
        m = np.array([r["mse"] for r in rs])
        lo = np.maximum(m - np.array([r["ci_low"] for r in rs]), 0)
        hi = np.array([r["ci_high"] for r in rs]) - m
        note = "" if rs[-1].get("private", True) else f", {rs[-1].get('encoder_privacy', 'non-private')}"
        ax.errorbar([r["d"] for r in rs], m, yerr=[lo, hi], **look(i), capsize=3,
                    label=f"{label} ({rs[-1]['bits_per_message']} b{note})")
    ax.set(xscale="log", yscale="log", xlabel="dimension d", ylabel="E‖ĝ − g‖²")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    facts = {"epsilon": result["epsilon"], "b": result["bits"], "‖g‖": result["norm"], "trials": result["trials"]}
    fig.suptitle(title("E1: estimation error against dimension", facts, width=70))
    return save(fig, path, dpi=120)


def pareto(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points no cheaper point beats: sorted by bits, each with a smaller MSE than every point before it."""
    out: list[dict[str, Any]] = []
    for r in sorted(rows, key=lambda r: (r["bits"], r["mse"])):
        if not out or r["mse"] < out[-1]["mse"]:
            out.append(r)
    return out


def plot_frontier(result: dict[str, Any], path: PathLike) -> Figure:
    """The frontier figure: per ``(d, ε)`` panel, each encoder's own Pareto front of per-message MSE against bits
    per message over its widths and coins (log-log; measured points with 95 % intervals; non-private references
    dashed; ``clean``'s float32 rounding error is off the scale and left out) and the best private MSE within each
    bit budget as a grey staircase."""
    settings = sorted({(r["d"], r["epsilon"]) for r in result["rows"]})
    dims, epss = sorted({d for d, _ in settings}), sorted({e for _, e in settings})
    fig = Figure(figsize=(5.2 * len(epss), 4.6 * len(dims) + 0.8), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(dims), len(epss), squeeze=False))
    names = list(dict.fromkeys(r["encoder"] for r in result["rows"]))  # one look per encoder in every panel
    for (d, eps), ax in ((s, axes[dims.index(s[0]), epss.index(s[1])]) for s in settings):
        rows = [r for r in result["rows"] if (r["d"], r["epsilon"]) == (d, eps) and r["mse"] is not None
                and r["encoder"] != "clean"]
        for name in dict.fromkeys(r["encoder"] for r in rows):
            rs = pareto([r for r in rows if r["encoder"] == name])
            m = np.array([r["mse"] for r in rs])
            err = [np.maximum(m - [r["ci_low"] for r in rs], 0), np.maximum(np.array([r["ci_high"] for r in rs]) - m, 0)]
            shape = {**look(names.index(name)), **({} if rs[0]["private"] else {"ls": "--"})}
            ax.errorbar([r["bits"] for r in rs], m, yerr=err, ms=3, capsize=2, lw=1, **shape,
                        label=name if rs[0]["private"] else f"{name} (not private)")
        best = pareto([r for r in rows if r["private"]])
        if best:
            ax.step([r["bits"] for r in best], [r["mse"] for r in best], where="post", color="0.5", lw=4, alpha=0.35,
                    label="frontier (private)")
        ax.set(xscale="log", yscale="log", xlabel="bits per message", ylabel="E‖x̂ − x‖² (one message)",
               title=f"d = {d:,}, ε = {eps:g}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    facts = {"‖x‖ = R": result["radius"], "trials": result["trials"]}
    fig.suptitle(title("Frontier: MSE against bits per message, each encoder's best over its widths and coins", facts,
                       width=100))
    save(fig, Path(path).with_suffix(".pdf"))
    return save(fig, path, dpi=110)


# ----------------------------------------------------------------------------- DP-MEPF
def plot_sample_grid(rows: Sequence[np.ndarray], class_names: Sequence[str], path: PathLike, text: str) -> Figure:
    """A labelled sample grid: one image strip per class (``rows[c]``: ``[H, W, 1|3]`` in [0, 1]) with
    its class name on the left, titled ``text``; 900 px wide."""
    fig = Figure(figsize=(9, 0.25 + 0.95 * len(rows)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(rows), 1))
    for ax, strip, name in zip(axes, rows, class_names):
        ax.imshow(strip[..., 0] if strip.shape[-1] == 1 else strip, cmap="gray", vmin=0, vmax=1,
                  interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=11)
    fig.suptitle(text, fontsize=10)
    return save(fig, path, dpi=100)


def sample_grid_title(pipeline: str, epsilon: float | None, detail: str = "") -> str:
    """The title of a pipeline's sample grid: pipeline, ε (∞: non-private; 0: public data only) and ``detail``."""
    eps = "not given" if epsilon is None else fmt_value(float(epsilon))
    return title(f"{pipeline or 'generated'} samples, one row per class", {"epsilon": eps}, detail, width=90)


REFERENCE_LINES = {"downstream_accuracy": ("probe_ceiling", "probe ceiling (same probe and protocol on real eval_fit)"),
                   "domain_fd": ("fd_floor", "FD floor (real eval_fit against eval_score)")}


def reference_lines(ax: Axes, refs: Mapping[str, Any] | None, key: str) -> None:
    """The held-out evaluation's reference for panel ``key`` as a black dash-dotted line: the probe ceiling on an
    accuracy panel, the FD floor on a domain-FD panel (nothing where ``refs`` lacks it)."""
    name, label = REFERENCE_LINES.get(key, ("", ""))
    if refs and refs.get(name) is not None:
        ax.axhline(refs[name], color="black", ls="-.", lw=1, label=label)


def points(ax: Axes, xs: Sequence[float], rows: Sequence[Mapping[str, Any]], key: str, fmt: str, **kw: Any) -> None:
    """``key`` of ``rows`` against ``xs``, with the 95 % interval ``<key>_ci`` as error bars where any row has one."""
    ys = [r[key] for r in rows]
    if any(r.get(f"{key}_ci") is not None for r in rows):
        ax.errorbar(xs, ys, yerr=[r.get(f"{key}_ci") or 0.0 for r in rows], fmt=fmt, capsize=3, **kw)
    else:
        ax.plot(xs, ys, fmt, **kw)


def _sweep_axes(ax: Axes, dp: list[dict[str, Any]], refs: list[dict[str, Any]], key: str, ylabel: str,
                calibration: Mapping[str, Any] | None = None) -> None:
    """One sweep panel: ``key`` against ε for the DP rows (with their intervals), each reference row as a
    horizontal line, and the evaluation's reference (:func:`reference_lines`)."""
    eps = [r["epsilon"] for r in dp]
    points(ax, eps, dp, key, "o-", color=look(0)["color"], label="DP-MEPF (ε of the run)")
    for i, (r, style) in enumerate(zip(refs, ("--", ":", "-.")), start=1):
        name = r["reference"].split(" (")[0] + (" (ε = ∞)" if r["epsilon"] is None else f" (ε = {fmt_value(r['epsilon'])})")
        ax.axhline(r[key], linestyle=style, color=look(i)["color"], label=name)
    reference_lines(ax, calibration, key)
    ax.set(xscale="log", xlabel="ε (δ fixed, replace-one)", ylabel=ylabel)
    ax.set_xticks(eps, [fmt_value(float(f"{e:.3g}")) for e in eps])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def plot_dp_sweep(rows: Sequence[dict[str, Any]], path: PathLike, facts: Mapping[str, Any],
                  calibration: Mapping[str, Any] | None = None) -> Figure:
    """A DP ε sweep: downstream accuracy and domain-FD against ε, the non-private and public-only rows as
    reference lines (rows: ``sweep_<profile>.json``'s, with ``reference``, ``epsilon`` and both metrics, and
    optionally their ``<metric>_ci``), and the ``calibration`` (``probe_ceiling``, ``fd_floor``) as lines."""
    dp = sorted((r for r in rows if r["reference"] == "dp"), key=lambda r: r["epsilon"])
    refs = [r for r in rows if r["reference"] != "dp"]
    if not dp:
        raise ValueError("a sweep plot needs at least one DP row (reference 'dp')")
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    ax = fig.subplots(1, 2)
    _sweep_axes(ax[0], dp, refs, "downstream_accuracy", "downstream accuracy (probe, held-out eval_score)", calibration)
    _sweep_axes(ax[1], dp, refs, "domain_fd", "domain-FD (not comparable to Inception FID)", calibration)
    ax[1].set_yscale("log")
    fig.suptitle(title("DP-MEPF ε sweep", facts, width=130))
    return save(fig, path)
