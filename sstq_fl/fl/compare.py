"""``sstq-fl compare``: several encoders on identical batches, curves and a bits/accuracy table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..io import atomic_write_bytes, atomic_write_json, run_meta
from ..rng import REPRODUCIBLE_WARNING
from .engine import RunConfig, run

DEFAULT_ENCODERS = ["clean", "privunit", "sqkr", "sstq-flat:b=4", "sstq-flat:b=4,codebook=optimized", "sstq-ma:b=4",
                    "vqsgd"]


def _slug(spec: str) -> str:
    return spec.replace(":", "_").replace(",", "_").replace("=", "-")


def compare(base: RunConfig, encoders: list[str], out: str | Path, resume: bool = False) -> dict[str, Any]:
    out = Path(out)
    results = {}
    if base.engine == "flower":  # one Flower simulation (one Ray start-up) for all encoders
        from strategies.sstq_server import run_flower_many

        jobs = [(replace(base, encoder=spec), out / _slug(spec), resume) for spec in encoders]
        results = dict(zip(encoders, run_flower_many(jobs)))
    for spec in encoders:
        if spec not in results:
            results[spec] = run(replace(base, encoder=spec), out / _slug(spec), resume=resume, progress=False)
        m = results[spec]
        print(f"  {spec}: final {_metric_name(m)} {_metric(m):.4g}, {m['final']['bits_per_client']} bits, "
              f"{m['final']['wall_s']:.1f} s", flush=True)
    rows = [{"encoder": s, "bits_per_client": m["final"]["bits_per_client"], _metric_name(m): _metric(m),
             "train_loss": m["final"]["train_loss"], "epsilon_total": m["final"]["epsilon_total"],
             "wall_s": m["final"]["wall_s"]} for s, m in results.items()]
    summary = {"config": {k: v for k, v in vars(base).items() if k != "encoder"}, "rows": rows, "meta": run_meta()}
    atomic_write_json(out / "comparison.json", summary)
    atomic_write_bytes(out / "comparison.md", (markdown(rows) + _randomness_line(base)).encode())
    plot_comparison(results, out / "comparison.png", base)
    return summary


def _randomness_line(base: RunConfig) -> str:
    """What the table's ε means for this run's randomness mode (and that train_loss is a diagnostic)."""
    note = ("the client keys and the server's sampling came from OS CSPRNGs" if base.randomness == "secure"
            else REPRODUCIBLE_WARNING)
    return (f"\nrandomness = {base.randomness}: {note}.  train_loss is a non-private simulation diagnostic "
            f"(pooled private training data).\n")


def _metric_name(m: dict[str, Any]) -> str:
    return "test_accuracy" if "test_accuracy" in m["final"] else "distance_to_optimum"


def _metric(m: dict[str, Any]) -> float:
    return float(m["final"][_metric_name(m)])


def markdown(rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def plot_comparison(results: dict[str, dict[str, Any]], path: Path, base: RunConfig) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for spec, m in results.items():
        r = m["rounds"]
        key = _metric_name(m)
        ax[0].plot([x["round"] for x in r], [x["train_loss"] for x in r], label=spec)
        ax[1].plot([x["round"] for x in r], [x[key] for x in r], label=spec)
        ax[2].scatter([m["final"]["bits_per_client"]], [_metric(m)], label=spec)
        ax[2].annotate(spec.split(":")[0], (m["final"]["bits_per_client"], _metric(m)), fontsize=7)
    key = _metric_name(next(iter(results.values())))
    ax[0].set(xlabel="round", ylabel="training loss (non-private diagnostic)", yscale="log")
    ax[1].set(xlabel="round", ylabel=key.replace("_", " "))
    ax[2].set(xlabel="bits per client per round", ylabel=f"final {key.replace('_', ' ')}", xscale="log")
    if key == "distance_to_optimum":
        ax[1].set_yscale("log")
        ax[2].set_yscale("log")
    ax[1].legend(fontsize=7)
    fig.suptitle(f"sstq-fl compare: {base.task}, {base.clients} clients, {base.rounds} rounds, eps={base.epsilon}, "
                 f"engine {base.engine}, randomness {base.randomness}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
