"""The figure of ``sstq-fl bench shuffle``: bounds per round, ε over training, E3 against both ε."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..fl.engine import METRIC_RANGES
from ..intervals import clip
from ..palette import look
from ..plots import finite, save, title


def _per_round(ax: Axes, rows: list[dict[str, Any]]) -> None:
    for i, e0 in enumerate(sorted({r["epsilon0"] for r in rows})):
        sel = [r for r in rows if r["epsilon0"] == e0]
        n = [r["messages"] for r in sel]
        c = look(i)["color"]
        ax.plot(n, [r["stronger_clone"] for r in sel], "-o", color=c, ms=3, label=f"ε₀ = {e0:g}")
        ax.plot(n, [r["fmt21_numerical"] for r in sel], "--", color=c, lw=1)
        ax.plot(n, finite([r["fmt21_closed_form"] for r in sel]), ":", color=c, lw=1)
    ax.set(xscale="log", yscale="log", xlabel="messages shuffled per round n", ylabel="central ε, one round",
           title="one round: stronger clone (—), FMT21 pair (--), FMT21 closed form (··)")
    ax.legend(fontsize=7)


def _rounds(ax: Axes, rows: list[dict[str, Any]]) -> None:
    e0s = sorted({r["epsilon0"] for r in rows})
    ax.plot(e0s, [next(r["local"] for r in rows if r["epsilon0"] == e) for e in e0s], "k-o", ms=3,
            label="local (against the server)")
    for i, n in enumerate(sorted({r["messages"] for r in rows})):
        ax.plot(e0s, [next(r["central"] for r in rows if r["epsilon0"] == e and r["messages"] == n) for e in e0s],
                "-o", color=look(i)["color"], ms=3, label=f"central, n = {n}")
    ax.set(yscale="log", xlabel="ε₀ per message", ylabel=f"ε after {rows[0]['rounds']} rounds",
           title=f"{rows[0]['rounds']} rounds, full participation")
    ax.legend(fontsize=7)


def _e3(ax: Axes, e3: dict[str, Any]) -> None:
    rows = e3["rows"]
    for i, enc in enumerate(sorted({r["encoder"] for r in rows})):
        sel = sorted((r for r in rows if r["encoder"] == enc), key=lambda r: r["epsilon0"])
        acc = [r["accuracy"] for r in sel]
        shape = look(i)
        ax.errorbar([r["central"] for r in sel], acc, yerr=_errors(acc, sel), fmt="-" + shape["marker"], ms=3,
                    color=shape["color"], capsize=2, label=enc)
        ax.plot([r["local"] for r in sel], acc, ":", color=shape["color"], lw=1)
    ref = sorted(e3.get("reference_rows", []), key=lambda r: r["central"])
    if ref:
        acc = [r["accuracy"] for r in ref]
        ax.errorbar([r["central"] for r in ref], acc, yerr=_errors(acc, ref), fmt="-s", color="k",
                    ms=4, capsize=2, label="central Gaussian (curator), same central ε")
    ax.set(xscale="log", xlabel=f"ε after the run: central, n = {rows[0]['messages']} (—), local (··)",
           ylabel="final test accuracy (95 % t interval over seeds)", title="E3 ε sweep against both guarantees")
    ax.legend(fontsize=6)


def _errors(acc: list[float], rows: list[dict[str, Any]]) -> list[list[float]]:
    """The accuracies' intervals as ``yerr``, clipped to accuracy's range (:data:`~sstq_fl.fl.engine.METRIC_RANGES`)."""
    cut = [clip(r["ci_low"], r["ci_high"], METRIC_RANGES["test_accuracy"]) for r in rows]
    return [[max(a - lo, 0.0) for a, (lo, _, _) in zip(acc, cut)], [max(hi - a, 0.0) for a, (_, hi, _) in zip(acc, cut)]]


def plot_shuffle(res: dict[str, Any], path: Path) -> None:
    panels = 3 if "e3" in res else 2
    fig = Figure(figsize=(6 * panels, 5.2), layout="constrained")
    ax = fig.subplots(1, panels)
    _per_round(ax[0], res["per_round"])
    _rounds(ax[1], res["rounds"])
    if "e3" in res:
        _e3(ax[2], res["e3"])
    fig.suptitle(title("sstq-fl bench shuffle: central ε of shuffled ε₀-LDP messages",
                       {"delta": res["delta"], "PLD grid": res["grid"]}, "replace-one, shuffler trusted", width=160))
    save(fig, path)
