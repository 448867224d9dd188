"""Collect a DP-VQG sweep's metrics.json files (``<tag>_*`` run folders, written by
``benchmarks/dp_vqg_sweep.sh``) into ``sweep_<tag>.json``, a markdown table ``sweep_<tag>.md`` (every field),
a reader's table ``summary_<tag>.md`` (rows against ε, which the documentation includes) and a plot
``sweep_<tag>.png``:

* left: downstream accuracy against the run's ε for FP and PP (95 % intervals over the releases), the ε = ∞
  and argmin ("not DP") runs and the probe ceiling (the same probe on real eval_fit) as reference lines;
* right: the EM's nearest-code probability against the per-location ε₀ of every DP run (the ε₀
  sweep included), with the uniform 1/K and the spec's best-case curve 1/(1+(K−1)e^{−ε₀/2})
  (§2.4 feasibility note), so what the note predicts and what the runs measured sit side by side.

Runs of one cell that differ only by seed (``<tag>_<name>_s<seed>``) are one table row and one point: the mean
over the releases and its 95 % Student-t interval (:mod:`gen_tables`); the table also has the probe ceiling and
the FD floor.

Usage: ``python benchmarks/dp_vqg_table.py benchmarks/results/dp_vqg cpu``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from gen_tables import (
    CAPTION,
    fmt_ci,
    group,
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

KEYS = ("downstream_accuracy", "domain_fd", "sample_label_agreement", "em_nearest_code_prob", "token_entropy_bits")


def _row(d: Path, m: dict[str, Any]) -> dict[str, Any]:
    cfg = m["config"]
    em = m.get("stage2", "em") == "em"  # dpsgd-prior rows: ε₂ is the prior's rounds alone, no ε₀
    return {"run": d.name, "variant": m["variant"], "stage2": m.get("stage2", "em"), "target_epsilon": cfg["epsilon"],
            "epsilon": m["epsilon"], "epsilon_stage1": m["epsilon_stage1"],
            "epsilon_stage2": m["epsilon_stage2"] if em else m["epsilon_stage2_certified"],
            "eps0_per_location": m["eps0_per_location"] if em else "-", "labels": m["labels"],
            "reference": m["reference"] or "dp", "relation": m.get("relation"), "prior_steps": m.get("prior_steps"),
            "downstream_accuracy": m["downstream_accuracy"], "domain_fd": m["domain_fd"],
            "sample_label_agreement": m.get("sample_label_agreement"), "prior_lr": m.get("prior_lr"),
            "em_nearest_code_prob": m["em_nearest_code_prob"], "token_entropy_bits": m["token_entropy_bits"],
            "codebook_size": _codebook_size(m),
            "record_level_epsilon": m.get("record_level_epsilon"), "dataset_epsilon_cumulative": m.get(
                "dataset_epsilon_cumulative"), "records": m["records"], "clients": m["clients"], "wall_s": m["wall_s"],
            "prior_epochs": cfg.get("prior_epochs"), "time_utc": m["meta"]["time_utc"], **reference_fields(m)}


def _codebook_size(m: dict[str, Any]) -> int | None:
    """K, from the EM diagnostic's uniform probability 1/K."""
    u = (m.get("em_diagnostics") or {}).get("uniform_probability")
    return round(1 / u) if u else None


def _fmt(v: Any, spec: str) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return "∞" if spec == "eps" else "-"
    if spec == "eps":
        return "∞" if isinstance(v, float) and math.isinf(v) else f"{v:.3g}"
    return format(v, spec)


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("| cell | n | variant | labels | records | ε target | ε (ledger) | ε₁ | ε₂ | ε₀ per location | accuracy | "
            "probe ceiling | label agreement | domain-FD | FD floor | EM nearest-code prob | token entropy (bits) | "
            "wall s (last) |")
    lines = [head, "|" + "---|" * 18]
    for r in rows:
        lines.append(f"| {r['run']} | {r['n']} | {r['variant']} | {r['labels']} | {r['records']} | "
                     f"{_fmt(r['target_epsilon'], 'eps')} | "
                     f"{_fmt(r['epsilon'], 'eps')} | {_fmt(r['epsilon_stage1'], 'eps')} | {_fmt(r['epsilon_stage2'], 'eps')} | "
                     f"{_fmt(r['eps0_per_location'], 'eps')} | {fmt_ci(r, 'downstream_accuracy', '.4f')} | "
                     f"{fmt_ci(r, 'probe_ceiling', '.4f')} | {fmt_ci(r, 'sample_label_agreement', '.3f')} | "
                     f"{fmt_ci(r, 'domain_fd', '.0f')} | {fmt_ci(r, 'fd_floor', '.1f')} | "
                     f"{fmt_ci(r, 'em_nearest_code_prob', '.4f')} | {fmt_ci(r, 'token_entropy_bits', '.3f')} | "
                     f"{r['wall_s']:.0f} |")
    return "\n".join(lines) + f"\n\n{CAPTION}\n"


def _label(c: dict[str, Any]) -> str:
    """A row's reader-facing name: variant, Stage II (with the prior's rounds), public labels, and the kind of
    reference for a run that is not the DP mechanism at its ε (the ε = ∞ runs share their DP row)."""
    words = [c["variant"].upper(), "EM" if c["stage2"] == "em" else f"DP-SGD prior, {c['prior_steps']} rounds"]
    if c["labels"] == "public":
        words.append("public labels")
    if c["reference"].startswith("argmin"):
        words.append("argmin tokens (not DP)")
    elif c["reference"].startswith("public-only"):
        words.append("public-only reference")
    return ", ".join(words) + (f", {c['records']:,} records" if c["records"] != 7996 else "")


def _column(c: dict[str, Any]) -> str:
    if c["epsilon"] == 0:
        return "ε = 0"
    return f"ε = {_fmt(c['target_epsilon'], 'eps')}" if c["reference"] == "dp" else "ε = ∞ (not DP)"


def _entry(c: dict[str, Any]) -> str:
    text = (f"{fmt_ci(c, 'downstream_accuracy', '.3f')} · {fmt_ci(c, 'sample_label_agreement', '.3f')} · "
            f"{fmt_ci(c, 'domain_fd', '.0f')} (n = {c['n']})")
    if c["stage2"] == "em" and c["reference"] == "dp":
        text += f"<br>ε₀ {_fmt(c['eps0_per_location'], '.3g')}, nearest code {_fmt(c['em_nearest_code_prob'], '.4f')}"
    return text


def summary(cells: list[dict[str, Any]]) -> str:
    """The sweep as a reader compares it: one line per row (:func:`_label`), one column per ε (the run's target;
    ε = 0 for a run that read no private record, ∞ for the non-private references), each entry the downstream
    accuracy, the label agreement and the domain-FD (mean ± 95 % half-width over the releases), and for the EM
    the per-location ε₀ and the nearest code's probability."""
    cells = sorted(plotted(cells), key=lambda c: (c["stage2"] != "em", c["prior_steps"] or 0, c["labels"] == "public",
                                                  c["variant"] == "pp", c["reference"] != "dp"))
    names = {_column(c) for c in cells}
    columns = sorted(names - {"ε = ∞ (not DP)"}, key=lambda n: float(n.removeprefix("ε = ")))
    columns += ["ε = ∞ (not DP)"] * ("ε = ∞ (not DP)" in names)
    refs = (f"probe ceiling {mean_ci([c['probe_ceiling'] for c in cells])[0]:.3f}, FD floor "
            f"{mean_ci([c['fd_floor'] for c in cells])[0]:.1f}, the evaluator's own test accuracy "
            f"{mean_ci([c['evaluator_accuracy'] for c in cells])[0]:.3f}")
    k = next((c["codebook_size"] for c in cells if c["codebook_size"]), None)
    return (pivot(cells, _label, _column, _entry, columns) +
            "\nEach entry: downstream accuracy · label agreement · domain-FD (mean ± 95 % Student-t half-width over n "
            f"independent releases; one value where n = 1). References (mean over the runs): {refs}; chance 0.10 for "
            f"accuracy and label agreement{f'; uniform code probability 1/K = {1 / k:.4f}' if k else ''}. "
            f"{relation_sentence(cells)}\n")


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def plot(rows: list[dict[str, Any]], path: Path, facts: dict[str, Any], calibration: dict[str, Any] | None = None
         ) -> Figure:
    """Accuracy against ε (FP, PP, with 95 % intervals; references and the probe ceiling as lines) and the EM's
    nearest-code probability against ε₀."""
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    ax = fig.subplots(1, 2)
    for v, colour in (("fp", "tab:blue"), ("pp", "tab:orange")):
        dp = sorted((r for r in rows if r["variant"] == v and r["reference"] == "dp" and r["labels"] == "private"
                     and r["stage2"] == "em" and _finite(r["target_epsilon"])), key=lambda r: r["target_epsilon"])
        points(ax[0], [r["target_epsilon"] for r in dp], dp, "downstream_accuracy", "o-", color=colour,
               label=f"{v.upper()}-VQG")
        for r in rows:
            if r["variant"] == v and r["stage2"] == "em" and (r["reference"] != "dp" or not _finite(r["target_epsilon"])):
                name = "ε = ∞, not DP" if not _finite(r["target_epsilon"]) else "argmin, not DP"
                ax[0].axhline(r["downstream_accuracy"], color=colour, ls="--" if name.startswith("ε") else ":",
                              label=f"{v.upper()} {name}")
    _dpsgd_lines(ax[0], rows)
    ax[0].axhline(0.1, color="grey", lw=0.8, label="chance (10 classes)")
    reference_lines(ax[0], calibration, "downstream_accuracy")
    ax[0].set(xscale="log", xlabel="record-level ε (δ = 1e-5, replace-one)",
              ylabel="downstream accuracy (probe, held-out eval_score)")
    ax[0].legend(fontsize=8)
    _em_axes(ax[1], rows)
    fig.suptitle(title("DP-VQG sweep", facts, width=130))
    return save(fig, path)


def _dpsgd_lines(ax: Any, rows: list[dict[str, Any]]) -> None:
    """The dpsgd-prior rows: PP against ε, and the public-only reference (no private record) as a line."""
    mine = [r for r in rows if r["stage2"] == "dpsgd-prior" and r["variant"] == "pp"]
    for steps, colour in zip(sorted({r["prior_steps"] for r in mine}), ("tab:olive", "tab:green", "tab:cyan")):
        dp = sorted((r for r in mine if r["reference"] == "dp" and r["prior_steps"] == steps),
                    key=lambda r: r["target_epsilon"])
        ax.plot([r["target_epsilon"] for r in dp], [r["downstream_accuracy"] for r in dp], "s-", color=colour,
                label=f"PP, DP-SGD prior, {steps} rounds")
        for r in mine:
            if r["prior_steps"] == steps and r["reference"].startswith("public-only"):
                ax.axhline(r["downstream_accuracy"], color=colour, ls=":", label=f"public-only reference ({steps})")


def _em_axes(ax: Any, rows: list[dict[str, Any]]) -> None:
    """EM nearest-code probability per run against ε₀, with 1/K and the best case 1/(1+(K−1)e^{−ε₀/2})."""
    pts = [r for r in rows if _finite(r["eps0_per_location"]) and r["reference"] == "dp"]
    if not pts:  # no exponential-mechanism run under the plotted evaluation
        ax.set_axis_off()
        return
    k = next((r["codebook_size"] for r in rows if r["codebook_size"]), 64)
    e0 = np.geomspace(min(r["eps0_per_location"] for r in pts) / 2, max(r["eps0_per_location"] for r in pts) * 2, 100)
    ax.plot(e0, 1 / (1 + (k - 1) * np.exp(-e0 / 2)), "k--", lw=1, label="best case (feasibility note)")
    ax.axhline(1 / k, color="grey", lw=0.8, label=f"uniform 1/K (K = {k})")
    for v, colour in (("fp", "tab:blue"), ("pp", "tab:orange")):
        mine = [r for r in pts if r["variant"] == v]
        ax.scatter([r["eps0_per_location"] for r in mine], [r["em_nearest_code_prob"] for r in mine], color=colour,
                   label=f"{v.upper()} runs (public diagnostic images)")
    ax.set(xscale="log", yscale="log", xlabel="per-location ε₀", ylabel="mean probability of the nearest code")
    ax.legend(fontsize=8)


def collect(out: Path, tag: str) -> list[dict[str, Any]]:
    """The sweep's runs (``<tag>_*/metrics.json`` under ``out``) as table rows, in the order they ran."""
    rows = [_row(d, json.loads((d / "metrics.json").read_text())) for d in sorted(out.glob(f"{tag}_*"))
            if (d / "metrics.json").is_file()]
    return sorted(rows, key=lambda r: r["time_utc"])


def main(folder: str, tag: str) -> None:
    out = Path(folder)
    rows = collect(out, tag)
    if not rows:
        raise SystemExit(f"dp_vqg_table: no {tag}_*/metrics.json under {out}")
    records = "/".join(str(n) for n in sorted({r["records"] for r in rows}))
    facts = {"profile": tag, "records": records, "clients": rows[0]["clients"], "δ": 1e-5,
             "prior epochs": rows[0]["prior_epochs"],
             "prior lr": rows[0]["prior_lr"], "runs": len(rows), **probe_facts(rows),
             "command": "bash benchmarks/dp_vqg_sweep.sh"}
    cells = group(rows, KEYS)
    ref = references(rows)
    atomic_write_json(out / f"sweep_{tag}.json", {"rows": rows, "cells": cells, "facts": facts, "meta": run_meta()})
    atomic_write_bytes(out / f"sweep_{tag}.md", _table(cells).encode())
    atomic_write_bytes(out / f"summary_{tag}.md", summary(cells).encode())
    plot(plotted(cells), out / f"sweep_{tag}.png", {**facts, "FD floor": ref["fd_floor"]}, ref)
    print(_table(cells))


if __name__ == "__main__":
    main(*sys.argv[1:3])
