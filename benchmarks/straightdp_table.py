"""Collect a StraightDP sweep's metrics.json files (``<tag>_*`` run folders, written by
``benchmarks/straightdp_sweep.sh``) into ``sweep_<tag>.json``, a markdown table ``sweep_<tag>.md`` (every
field), a reader's table ``summary_<tag>.md`` (rows against ε, which the documentation includes) and a plot
``sweep_<tag>.png``.  Each run is put in a row of the spec's comparison by its method and port:

* ``sgd`` (uniform DP-SGD with the whole ε), ``moments`` (samples from the released Gaussians alone),
  ``distill`` and ``guidance`` (moments + DP-SGD on t ≥ τ, the moments entering by distillation or by
  starting the sampler at t₀ from the released Gaussian) and ``public_guidance`` (the public prior +
  guidance); ``+tha`` is appended for a time-bucketed clip profile, ``+low_b0`` for the low-B0 backbone;
* ``latent_<row>`` for a run in the latent space of the frozen public autoencoder (``--space latent``), and
  ``+tau<τ>`` for a run whose τ was given (``--tau``) instead of the public knee rule's (the τ ablation);
* ``+q<q>`` and ``+r<rounds>`` for a DP-SGD run whose Poisson rate (``--q``) or rounds (``--sgd-steps``) differ
  from the sweep's usual ones (the batch and rounds ablations).

Runs of one cell that differ only by seed (``<tag>_<row>_eps<E>_s<seed>``) are one table row and one point:
the mean over the releases and its 95 % Student-t interval (:mod:`gen_tables`).

The plot has two panels, one line with markers per row against the run's target record-level ε (log x), for the
runs of the sweep's main probe and protocol (the most common; the other probes' rows are in the tables):

* left: downstream accuracy (the probe trained on the synthetic samples, tested on the held-out eval_score),
  the ε = ∞ runs (the same releases without noise, not DP) as dashed horizontal lines in the row's colour,
  chance (0.1, ten classes) as a grey line and the probe ceiling (the same probe on real eval_fit) in black;
* right: domain-FD (Fréchet distance in the domain classifier's features, not comparable to Inception FID;
  lower is better), the ε = ∞ runs again as dashed lines and the FD floor (real eval_fit) in black.

In ``metrics.json`` an infinite ε is written ``null`` (``sstq_fl.io.finite_json``); so is every other absent
quantity (σ of a stage the method does not run, σ at ε = ∞).  Missing optional fields are shown as ``-``.

Usage: ``python benchmarks/straightdp_table.py benchmarks/results/straightdp cpu``.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from gen_tables import (
    CAPTION,
    fmt_ci,
    group,
    main_probe,
    mean_ci,
    pivot,
    plotted,
    probe_facts,
    reference_fields,
    references,
    relation_sentence,
)
from matplotlib.figure import Figure

from sstq_fl.io import atomic_write_bytes, atomic_write_json, run_meta
from sstq_fl.plots import points, reference_lines, save, title

KEYS = ("downstream_accuracy", "domain_fd", "sample_label_agreement")

ROWS = ("sgd", "moments", "distill", "guidance", "public_guidance", "latent_moments", "latent_distill",
        "latent_guidance", "latent_public_guidance", "latent_sgd")
COMMAND = "bash benchmarks/straightdp_sweep.sh"
DESCRIBE = {"sgd": "uniform DP-SGD (the whole ε)", "moments": "moments only", "distill": "moments + DP-SGD, distillation",
            "guidance": "moments + DP-SGD, guidance at τ", "public_guidance": "public prior + guidance from the release"}


def row_name(method: str | None, port: str | None, tha: Any = None, low_b0: Any = False, space: str | None = None,
             tau: float | None = None) -> str:
    """The comparison row of a run: sgd / moments / distill / guidance / public_guidance (+tha, +low_b0), with
    ``latent_`` in front in the latent space and ``+tau<τ>`` after for a given τ (``tau``: the config's, or
    ``None`` for the knee rule's)."""
    port = port or "none"
    if method == "sgd":
        name = "sgd"
    elif method == "moments":
        name = "public_guidance" if port == "guidance" else "moments"
    elif method == "moments+sgd":
        name = "guidance" if port == "guidance" else "distill"
    else:
        name = f"{method}/{port}"
    prefix = "latent_" if space == "latent" else ""
    return prefix + name + ("+tha" if tha else "") + ("+low_b0" if low_b0 else "") + (f"+tau{tau:g}" if tau else "")


def _eps(v: Any) -> float:
    """A written ε as a float: ``null`` (how ``finite_json`` writes ∞) is ∞."""
    return math.inf if v is None else float(v)


def _row(d: Path, m: dict[str, Any]) -> dict[str, Any]:
    cfg = m.get("config") or {}
    method = m.get("method", cfg.get("method"))
    target = _eps(cfg["epsilon"]) if "epsilon" in cfg else _eps(m.get("epsilon"))
    row = row_name(method, m.get("port"), m.get("tha"), m.get("low_b0"), m.get("space"), cfg.get("tau"))
    return {"run": d.name, "row": row,
            "method": method, "port": m.get("port"), "tha": m.get("tha"), "target_epsilon": target,
            "epsilon": _eps(m.get("epsilon")), "delta": m.get("delta"), "relation": m.get("relation"),
            "randomness": m.get("randomness"), "dataset_epsilon_cumulative": m.get("dataset_epsilon_cumulative"),
            "epsilon_moments": m.get("epsilon_moments"), "sigma_moments": m.get("sigma_moments"),
            "sigma_sgd": m.get("sigma_sgd"), "tau": m.get("tau"), "t0": m.get("t0"), "r_f": m.get("r_f"),
            "pca_dim": m.get("pca_dim"), "rank": m.get("rank"), "sgd_steps": m.get("sgd_steps"), "q": m.get("q"),
            "downstream_accuracy": m.get("downstream_accuracy"), "domain_fd": m.get("domain_fd"),
            "sample_label_agreement": m.get("sample_label_agreement"), "records": m.get("records"),
            "clients": m.get("clients"), "profile": cfg.get("profile"), "wall_s": m.get("wall_s"), **reference_fields(m),
            "time_utc": (m.get("meta") or {}).get("time_utc", "")}


def _mark_ablations(rows: list[dict[str, Any]]) -> None:
    """Append ``+q<q>`` and ``+r<rounds>`` to the row of every DP-SGD run whose Poisson rate or rounds differ from
    the sweep's usual ones (the most common among its DP-SGD runs), so that a batch or rounds ablation is a row
    and a line of its own."""
    trained = [r for r in rows if "sgd" in (r["method"] or "") and r["sgd_steps"]]
    if not trained:
        return
    for key, mark in (("q", "q"), ("sgd_steps", "r")):
        usual = Counter(r.get(key) for r in trained).most_common(1)[0][0]
        for r in trained:
            if r.get(key) != usual:
                r["row"] += f"+{mark}{r[key]:g}"


def _order(r: dict[str, Any]) -> tuple[Any, ...]:
    """The sweep's row order (unknown rows after, by name), then ε ascending with ∞ last."""
    base = r["row"].split("+")[0]
    return (ROWS.index(base) if base in ROWS else len(ROWS), r["row"], r["target_epsilon"], r["time_utc"])


def _fmt(v: Any, spec: str) -> str:
    if spec == "eps":
        return "∞" if v is None or (isinstance(v, float) and math.isinf(v)) else f"{v:.3g}"
    return "-" if v is None else format(v, spec)


def _eps_moments(r: dict[str, Any]) -> str:
    """ε of the moment release: none for DP-SGD alone; ``null`` means ∞ in a non-private run, absent in a DP one."""
    if r["method"] == "sgd" or (r["epsilon_moments"] is None and _finite(r["target_epsilon"])):
        return "-"
    return _fmt(r["epsilon_moments"], "eps")


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("| cell | n | row | ε target | ε (ledger) | ε moments | σ moments | σ sgd | τ | t₀ | accuracy | probe ceiling | "
            "label agreement | domain-FD | FD floor | wall s (last) |")
    lines = [head, "|" + "---|" * 16]
    for r in rows:
        lines.append(f"| {r['run']} | {r['n']} | {r['row']} | {_fmt(r['target_epsilon'], 'eps')} | "
                     f"{_fmt(r['epsilon'], 'eps')} | {_eps_moments(r)} | {_fmt(r['sigma_moments'], '.3g')} | "
                     f"{_fmt(r['sigma_sgd'], '.3g')} | {_fmt(r['tau'], '.3g')} | {_fmt(r['t0'], '.3g')} | "
                     f"{fmt_ci(r, 'downstream_accuracy', '.4f')} | {fmt_ci(r, 'probe_ceiling', '.4f')} | "
                     f"{fmt_ci(r, 'sample_label_agreement', '.3f')} | {fmt_ci(r, 'domain_fd', '.0f')} | "
                     f"{fmt_ci(r, 'fd_floor', '.1f')} | {_fmt(r['wall_s'], '.0f')} |")
    delta = next((r["delta"] for r in rows if r["delta"] is not None), None)
    relation = next((r["relation"] for r in rows if r["relation"]), None)
    randomness = sorted({r["randomness"] for r in rows if r["randomness"]})
    note = (f"\nε at δ = {_fmt(delta, 'g')} ({relation or '-'}), randomness {', '.join(randomness) or '-'}; "
            "ε (ledger) is the run's composed record-level ε; ε = ∞ runs are the same releases without noise (not DP); "
            "σ is '-' for a stage the method does not run or at ε = ∞; domain-FD is not comparable to Inception FID.\n"
            f"\n{CAPTION}\n")
    return "\n".join(lines) + "\n" + note


def _label(c: dict[str, Any]) -> str:
    """A row's reader-facing name: the method, the space, then any ablation (τ, rounds) and a non-CPU probe."""
    base, *marks = c["row"].split("+")
    words = [DESCRIBE.get(base.removeprefix("latent_"), base), "latent" if base.startswith("latent_") else "pixel"]
    for m in marks:
        words.append(f"τ = {m[3:]}" if m.startswith("tau") else f"{int(m[1:]):,} rounds" if m[1:].isdigit()
                     else f"Poisson rate q = {m[1:]}" if m.startswith("q") else m)
    probe, protocol = _probe(c)
    if probe not in ("", "lenet"):
        words.append(f"{probe} probe")
    if protocol == "papers":
        words.append("papers' protocol" if probe not in ("", "lenet") else "papers' probe")
    return ", ".join(words)


def _probe(c: dict[str, Any]) -> tuple[str, str]:
    """``(probe, protocol)`` of a cell, from its label ``"lenet (papers, 10 epochs, ...)"`` (empty before it)."""
    label = c.get("probe") or ""
    return label.split(" (")[0], label.split(" (")[-1].split(",")[0] if " (" in label else ""


def summary(cells: list[dict[str, Any]]) -> str:
    """The sweep as a reader compares it: one line per row, one column per target ε, each entry the downstream
    accuracy and the domain-FD (mean ± 95 % half-width over the releases) and the number of releases; then the
    references they are read against, per probe protocol."""
    cells = plotted(cells)
    finite = sorted({c["target_epsilon"] for c in cells if _finite(c["target_epsilon"])})
    columns = [f"ε = {_fmt(e, 'eps')}" for e in finite] + ["ε = ∞ (not DP)"] * any(not _finite(c["target_epsilon"])
                                                                                 for c in cells)

    def column(c: dict[str, Any]) -> str:
        return f"ε = {_fmt(c['target_epsilon'], 'eps')}" + ("" if _finite(c["target_epsilon"]) else " (not DP)")

    def entry(c: dict[str, Any]) -> str:
        return (f"{fmt_ci(c, 'downstream_accuracy', '.3f')} · {fmt_ci(c, 'domain_fd', '.0f')} "
                f"(n = {c['n']})")

    refs = []
    for probe, protocol in sorted({_probe(c) for c in cells} - {("", "")}):
        mine = [c for c in cells if _probe(c) == (probe, protocol)]
        refs.append(f"probe ceiling, {probe} at the {protocol} protocol: "
                    f"{_fmt(mean_ci([c['probe_ceiling'] for c in mine])[0], '.3f')}")
    floor = mean_ci([c["fd_floor"] for c in cells])[0]
    return (pivot(cells, _label, column, entry, columns) +
            "\nEach entry: downstream accuracy · domain-FD (mean ± 95 % Student-t half-width over n independent "
            f"releases; one value where n = 1). References, the mean over the rows' runs (each run's own in the "
            f"full sweep table): {'; '.join(refs) or '-'}; FD floor {_fmt(floor, '.1f')}; chance 0.10. "
            f"{relation_sentence(cells)}\n")


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def plot(rows: list[dict[str, Any]], path: Path, facts: dict[str, Any], calibration: dict[str, Any] | None = None
         ) -> Figure:
    """Downstream accuracy and domain-FD against the target ε, one line per row (95 % intervals over the
    releases as error bars), ε = ∞ runs as dashed lines, the probe ceiling and the FD floor in black."""
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    ax = fig.subplots(1, 2)
    names = list(dict.fromkeys(r["row"] for r in rows))
    colours = {n: f"C{i % 10}" for i, n in enumerate(names)}
    for a, key in zip(ax, ("downstream_accuracy", "domain_fd")):
        for n in names:
            mine = [r for r in rows if r["row"] == n and _finite(r[key])]
            dp = sorted((r for r in mine if _finite(r["target_epsilon"])), key=lambda r: r["target_epsilon"])
            if dp:
                points(a, [r["target_epsilon"] for r in dp], dp, key, "o-", color=colours[n], label=n)
            for i, r in enumerate(r for r in mine if not _finite(r["target_epsilon"])):
                a.axhline(r[key], color=colours[n], ls="--", lw=1, label=f"{n}, ε = ∞ (not DP)" if i == 0 else None)
        reference_lines(a, calibration, key)
        if any(_finite(r["target_epsilon"]) for r in rows):
            a.set_xscale("log")
    delta = facts.get("δ")
    xlabel = f"target record-level ε (δ = {_fmt(delta, 'g')}, {facts.get('relation') or 'add/remove-one'})"
    ax[0].axhline(0.1, color="grey", lw=0.8, label="chance (10 classes)")
    ax[0].set(xlabel=xlabel, ylabel="downstream accuracy (probe, held-out eval_score)")
    ax[1].set(xlabel=xlabel, ylabel="domain-FD (lower is better; not Inception FID)")
    for a in ax:
        a.legend(fontsize=8)
    shown = {k: v for k, v in facts.items() if k != "relation"}
    fig.suptitle(title("StraightDP sweep (sstq-fl gen straightdp)", shown, width=130))
    return save(fig, path)


def collect(out: Path, tag: str) -> list[dict[str, Any]]:
    """The sweep's runs (``<tag>_*/metrics.json`` under ``out``) as table rows, ablations marked, in table order."""
    rows = [_row(d, json.loads((d / "metrics.json").read_text())) for d in sorted(out.glob(f"{tag}_*"))
            if (d / "metrics.json").is_file()]
    _mark_ablations(rows)
    return sorted(rows, key=_order)


def main(folder: str, tag: str) -> None:
    out = Path(folder)
    rows = collect(out, tag)
    if not rows:
        raise SystemExit(f"straightdp_table: no {tag}_*/metrics.json under {out}")
    first = {k: next((r[k] for r in rows if r[k] is not None), None) for k in ("records", "clients", "delta",
                                                                                 "relation", "profile")}
    cells = group(rows, KEYS)
    shown = main_probe(plotted(rows))  # the plot's one probe and protocol
    facts = {"profile": tag, "pipeline profile": first["profile"] if first["profile"] != tag else None,
             "records": first["records"], "clients": first["clients"], "δ": first["delta"],
             "relation": first["relation"], "runs": len(shown), **probe_facts(shown), "command": COMMAND}
    atomic_write_json(out / f"sweep_{tag}.json", {"rows": rows, "cells": cells, "facts": facts, "meta": run_meta()})
    atomic_write_bytes(out / f"sweep_{tag}.md", _table(cells).encode())
    atomic_write_bytes(out / f"summary_{tag}.md", summary(cells).encode())
    plot(main_probe(plotted(cells)), out / f"sweep_{tag}.png", facts, references(shown))
    print(_table(cells))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: python benchmarks/straightdp_table.py FOLDER TAG")
    main(sys.argv[1], sys.argv[2])
