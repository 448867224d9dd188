"""The figure of ``sstq-fl bench round-cost``: per cohort size, the round's stages stacked, measured beside
their floors (and the previous methods where measured), each bar's total and ratio to the floor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..plots import save, title


def _bars(row: dict[str, Any], stages: list[str]) -> dict[str, dict[str, float]]:
    """The stacked bars of one cohort: ``now``, ``floor`` and, where measured, the previous gradient method
    (``vmap``) and Kashin without row chunks, each timed once on the same round, in place of today's."""
    now, floor = row["stages_s"], row["floors_s"]
    bars = {"now": {s: now[s] for s in stages}, "floor": {s: floor[s] for s in stages}}
    ref = row.get("reference_s")
    if ref:
        before = dict(bars["now"])
        before.update({s: ref[s] for s in ("gradients", "kashin") if s in ref})
        bars = {"vmap +\nunchunked": before, **bars}
    return bars


def _cohort(ax: Axes, row: dict[str, Any], stages: list[str], legend: bool) -> None:
    bars = _bars(row, stages)
    scale = 1e3 / row["clients"]  # ms per client
    for x, parts in enumerate(bars.values()):
        bottom = 0.0
        for i, s in enumerate(stages):
            h = parts[s] * scale
            ax.bar(x, h, bottom=bottom, color=f"C{i % 10}", hatch="//" if i >= 10 else None,
                   label=s if legend and x == 0 else None, width=0.6)
            bottom += h
        ax.text(x, bottom, f"{bottom:.3g}", ha="center", va="bottom", fontsize=7)
    total_floor = sum(bars["floor"].values())
    ax.set_xticks(range(len(bars)), [f"{k}\n×{sum(v.values()) / total_floor:.1f}" if total_floor > 0 else k
                                     for k, v in bars.items()], fontsize=8)
    ax.set(ylabel="ms per client", title=f"{row['clients']:,} clients: round {row['round_s']:.2f} s")


def plot_round_cost(res: dict[str, Any], path: Path) -> Figure:
    """Write the round-cost figure of ``res`` (:func:`sstq_fl.bench.round_cost.round_cost`) to ``path``."""
    rows = res["cohorts"]
    stages = [s for s in rows[0]["stages_s"]]
    fig = Figure(figsize=(4.2 * len(rows) + 1.5, 4.6), layout="constrained")
    axes = fig.subplots(1, len(rows), squeeze=False)[0]
    for i, (ax, row) in enumerate(zip(axes, rows, strict=True)):
        _cohort(ax, row, stages, legend=i == len(rows) - 1)
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    m = res["meta"]["machine"]
    fig.suptitle(title("sstq-fl bench round-cost", {"task": res["task"], "encoder": res["encoder"]},
                       f"{m.get('cpus')} CPUs, {m.get('torch_threads')} torch threads; clients on "
                       f"{res.get('gpu') if res.get('device', 'cpu') != 'cpu' else 'the CPU'}",
                       "vmap + unchunked: vmap gradients and Kashin without row chunks, timed once on the same "
                       "round; ×: ratio to the floor"),
                 fontsize=9)
    return save(fig, path)
