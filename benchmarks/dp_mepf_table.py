"""Collect a DP-MEPF sweep's metrics.json files into sweep_<profile>.json, a markdown table (and a reader's one,
summary_<profile>.md, which the documentation includes) and a plot
(sweep_<profile>.png: downstream accuracy and domain-FD against epsilon with 95 % intervals over the releases,
the non-private and public-only runs, the probe ceiling and the FD floor as reference lines).  ``--plot-only``
redraws the plot from an existing sweep_<profile>.json.

Runs of one cell that differ only by seed (``<cell>_s<seed>``) are one row: the mean over the releases and its
95 % Student-t interval (:mod:`gen_tables`).  Rows are in the order their cells first finished, and
``dataset eps (cumulative)`` is the private data set's cumulative epsilon (its dataset ledger, PLD composition)
after the cell's last run.  Metrics written before the tight sensitivity and the class-balanced domain-FD (no
``sensitivity`` key) are marked stale.
"""

import json
import sys
from pathlib import Path
from typing import Any

from gen_tables import (
    CAPTION,
    fmt_ci,
    group,
    main_probe,
    plotted,
    probe_facts,
    reference_fields,
    references,
    relation_sentence,
)

from sstq_fl.io import atomic_write_bytes, atomic_write_json, run_meta
from sstq_fl.plots import plot_dp_sweep

KEYS = ("downstream_accuracy", "domain_fd", "label_consistency")

STALE = ("**Stale**: these runs predate the tight DP-MEPF sensitivity (noise std σ·Δ/2, Δ = max(√(2(1+m)), 2√m)), "
         "secure randomness, the dataset ledger and the class-balanced domain-FD (the real set was priv_test[:m], "
         "digits 0-4 only); their domain-FD and membership AUC are not comparable with current runs.  Re-run with "
         "`TAG=large EXTRA=... bash benchmarks/dp_mepf_sweep.sh`.")


def _row(d: Path, m: dict[str, Any]) -> dict[str, Any]:
    ledger = m.get("dataset_ledger") or {}
    return {"run": d.name, "reference": m["reference"], "epsilon": m["epsilon"], "delta": m["delta"],
            "relation": m.get("relation"),
            "sigma": m["sigma"], "noise_std": m.get("noise_std"), "sensitivity": m.get("sensitivity"),
            "randomness": m.get("randomness", "reproducible"),
            "dataset_epsilon_cumulative": m.get("dataset_epsilon_cumulative"), "dataset_runs": ledger.get("runs"),
            "downstream_accuracy": m["downstream_accuracy"], "domain_fd": m["domain_fd"],
            "label_consistency": m["evaluation"]["domain_fd_detail"]["label_consistency"],
            **reference_fields(m), "records": m["records"], "clients": m["clients"], "wall_s": m["wall_s"],
            "time_utc": m["meta"]["time_utc"], "stale": "sensitivity" not in m}


def _fmt(v: Any, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def _line(r: dict[str, Any]) -> str:
    eps = "0" if r["reference"].startswith("public-only") else _fmt(r["epsilon"], ".3g", "inf")
    cum = "n/a" if r["stale"] else _fmt(r["dataset_epsilon_cumulative"], ".3g", "inf")
    return (f"| {r['run']} | {r['n']} | {eps} | {_fmt(r['sigma'], '.3g')} | {_fmt(r['noise_std'], '.3g')} | {cum} | "
            f"{fmt_ci(r, 'downstream_accuracy', '.3f')} | {fmt_ci(r, 'probe_ceiling', '.3f')} | "
            f"{fmt_ci(r, 'domain_fd', '.1f')} | {fmt_ci(r, 'fd_floor', '.1f')} | {fmt_ci(r, 'label_consistency', '.3f')} | "
            f"{r['wall_s']:.0f} |")


def _label(c: dict[str, Any]) -> str:
    """A cell's reader-facing name: its ε (0 for the public-only reference, ∞ for the non-private one), and a
    probe or protocol other than the sweep's LeNet-5 at the CPU protocol."""
    eps = "ε = 0 (public only)" if c["reference"].startswith("public-only") else (
        f"ε = {_fmt(c['epsilon'], '.3g', '∞')}" + (" (not DP)" if c["epsilon"] is None else ""))
    label = c.get("probe") or ""
    probe, protocol = label.split(" (")[0], label.split(" (")[-1].split(",")[0] if " (" in label else ""
    extra = [f"{probe} probe"] * (probe not in ("", "lenet")) + ["papers' protocol"] * (protocol == "papers")
    return ", ".join([eps, *extra])


def summary(cells: list[dict[str, Any]]) -> str:
    """The sweep as a reader compares it: one line per cell (:func:`_label`), its releases, downstream accuracy
    beside its own probe ceiling, domain-FD and label consistency (mean ± 95 % half-width over the releases)."""
    cells = plotted(cells)
    lines = ["| cell | n | downstream accuracy | probe ceiling | domain-FD | label consistency |", "|---" * 6 + "|"]
    lines += [f"| {_label(c)} | {c['n']} | {fmt_ci(c, 'downstream_accuracy', '.3f')} | {fmt_ci(c, 'probe_ceiling', '.3f')} | "
              f"{fmt_ci(c, 'domain_fd', '.0f')} | {fmt_ci(c, 'label_consistency', '.3f')} |" for c in cells]
    floor = next((c["fd_floor"] for c in cells if c["fd_floor"] is not None), None)
    return ("\n".join(lines) + "\n\nMean ± 95 % Student-t half-width over n independent releases; the probe ceiling is "
            f"the same probe and protocol trained on real held-out digits; FD floor {_fmt(floor, '.1f')}; chance 0.10. "
            f"{relation_sentence(cells)}\n")


def collect(root: Path, profile: str) -> list[dict[str, Any]]:
    """The sweep's runs (``<profile>_*/metrics.json`` under ``root``) as table rows, in the order they ran."""
    rows = [_row(d, json.loads((d / "metrics.json").read_text()))
            for d in sorted(root.glob(f"{profile}_*")) if (d / "metrics.json").exists()]
    return sorted(rows, key=lambda r: r["time_utc"])


def plot(root: str, profile: str) -> Path:
    """Draw ``sweep_<profile>.png`` from ``sweep_<profile>.json`` in ``root``, titled with what produced it: the
    runs of the sweep's main probe and protocol (another probe's cells are in the tables)."""
    sweep = json.loads((Path(root) / f"sweep_{profile}.json").read_text())
    rows = main_probe(plotted(sweep["rows"]))
    facts = {"profile": profile, "records": rows[0]["records"], "clients": rows[0]["clients"], "delta": rows[0]["delta"],
             "randomness": ", ".join(sorted({r["randomness"] for r in rows})), "runs": len(rows),
             **probe_facts(rows), "command": sweep.get("command"), "stale runs": sum(r["stale"] for r in rows) or None}
    path = Path(root) / f"sweep_{profile}.png"
    plot_dp_sweep(plotted(group(rows, KEYS)), path, facts, references(rows))
    return path


def main(root: str, profile: str) -> None:
    rows = collect(Path(root), profile)
    atomic_write_json(Path(root) / f"sweep_{profile}.json", {"profile": profile, "rows": rows, "meta": run_meta(),
                                                              "command": f"TAG={profile} bash benchmarks/dp_mepf_sweep.sh"})
    lines = [STALE, ""] if any(r["stale"] for r in rows) else []
    lines += ["| cell | n | epsilon (run) | sigma | noise std | dataset eps (cumulative) | downstream accuracy | "
              "probe ceiling | domain-FD* | FD floor | label consistency | wall s (last) |", "|---" * 12 + "|"]
    lines += [_line(r) for r in group(rows, KEYS)]
    randomness = sorted({r["randomness"] for r in rows})
    lines.append(f"\nRows in run order; delta = {rows[0]['delta']:g}, replace-one, randomness {', '.join(randomness)}. "
                 "noise std = sigma * Delta / 2 with Delta the release's replace-one sensitivity (2 for one moment). "
                 "dataset eps: the data set's ledger after the run (PLD composition of every run that read it; "
                 "inf once a non-private run read it; a public-only run adds nothing).")
    lines.append("\n*domain-FD: Fréchet distance in an evaluation-only MNIST CNN's features (trained on eval_fit) "
                 "against a class-balanced eval_score subset; not comparable to Inception FID.")
    lines.append(f"\n{CAPTION}")
    atomic_write_bytes(Path(root) / f"sweep_{profile}.md", ("\n".join(lines) + "\n").encode())
    atomic_write_bytes(Path(root) / f"summary_{profile}.md", summary(group(rows, KEYS)).encode())
    print("\n".join(lines))
    print(f"wrote {plot(root, profile)}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--plot-only"]
    if "--plot-only" in sys.argv[1:]:
        print(f"wrote {plot(args[0], args[1] if len(args) > 1 else 'cpu')}")
    else:
        main(args[0], args[1] if len(args) > 1 else "cpu")
