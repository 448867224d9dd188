"""``sstq-fl compare``: several encoders on identical batches, curves and a bits/accuracy table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..io import atomic_write_bytes, atomic_write_json, clear_out, run_meta
from ..progress import Progress, progress
from ..rng import REPRODUCIBLE_WARNING
from .engine import RunConfig, Trainer, existing_outputs, read_checkpoint, run, trainers

DEFAULT_ENCODERS = ["clean", "privunit", "privunit-mrc", "sqkr", "sstq-flat:b=4", "sstq-flat:b=4,codebook=optimized",
                    "sstq-ma:b=4", "sstq-ma:b=4,decode=identity", "vqsgd"]


COMPARISON_FILES = ("comparison.json", "comparison.md", "comparison.png")


def _slug(spec: str) -> str:
    return spec.replace(":", "_").replace(",", "_").replace("=", "-")


def prepare_out(base: RunConfig, encoders: list[str], out: Path, resume: bool, force: bool) -> dict[str, int]:
    """Check ``out`` before anything is trained; return the round each started encoder resumes from.

    Without ``resume``, a folder holding a previous comparison's files (for these encoders) is
    refused unless ``force`` (then those files are removed).  With ``resume``, at least one
    encoder's checkpoint must be there, each made with this config."""
    if not resume:
        files = existing_outputs(out, COMPARISON_FILES) + [f for s in encoders for f in existing_outputs(out / _slug(s))]
        clear_out(files, out, force)
        return {}
    started = [s for s in encoders if (out / _slug(s) / "checkpoint.json").is_file()]
    if not started:
        raise ValueError(f"--resume: no checkpoint in {out} (nothing to resume; run without --resume)")
    return {s: int(read_checkpoint(out / _slug(s), replace(base, encoder=s))["round"]) for s in started}


def compare(base: RunConfig, encoders: list[str], out: str | Path, resume: bool = False,
            force: bool = False) -> dict[str, Any]:
    """Train every encoder on identical batches into ``out``/<encoder>; write the table and plots.

    Every spec is checked (its trainer built) and ``out`` is checked (:func:`prepare_out`)
    before the first round is trained; nothing is written if either check fails."""
    out = Path(out)
    built = trainers(base, encoders)
    for spec, t in prepare_out(base, encoders, out, resume, force).items():
        print(f"resuming {spec} from round {t} of {base.rounds} in {out / _slug(spec)}", flush=True)
    results = {}
    with progress(len(encoders), "encoders", every=1) as sweep:
        if base.engine == "flower":  # one Flower simulation (one Ray start-up) for all encoders
            from ..backends import backend  # Flower stays at the edges: found by entry point

            jobs = [(replace(base, encoder=spec), out / _slug(spec), resume) for spec in encoders]
            runs = backend("flower-train-many")(jobs, on_result=lambda i, m: _finished(sweep, encoders[i], m))
            results = dict(zip(encoders, runs))
        for spec in encoders:
            if spec not in results:
                results[spec] = _train(built[spec], out / _slug(spec), resume)
                _finished(sweep, spec, results[spec])
    rows = [_row(s, m) for s, m in results.items()]
    summary = {"config": {k: v for k, v in vars(base).items() if k != "encoder"}, "rows": rows, "meta": run_meta()}
    atomic_write_json(out / "comparison.json", summary)
    atomic_write_bytes(out / "comparison.md", (markdown(rows) + _randomness_line(base)).encode())
    plot_comparison(results, out / "comparison.png", base)
    return summary


def _finished(sweep: Progress, spec: str, m: dict[str, Any]) -> None:
    """Print an encoder's final line and advance the sweep, as soon as its run ends."""
    print(f"  {spec}: final {_metric_name(m)} {_metric(m):.4g}, {m['final']['bits_per_client']} bits, "
          f"{m['final']['wall_s']:.1f} s", flush=True)
    sweep.advance(encoder=spec, final=f"{_metric_name(m).replace('_', ' ')} {_metric(m):.4g}")


def _train(trainer: Trainer, out: Path, resume: bool) -> dict[str, Any]:
    """One encoder's run on the vectorized engine, with a bar for its rounds on a terminal, else one log line a round."""
    with progress(trainer.cfg.rounds, f"{trainer.cfg.encoder} rounds", key="rounds", every=1):
        return run(trainer.cfg, out, resume=resume, progress=False, trainer=trainer)


def _row(spec: str, m: dict[str, Any]) -> dict[str, Any]:
    """One encoder's table row; ``wall_s`` counts the rounds, ``setup_s`` the untimed warm-up before them."""
    f = m["final"]
    return {"encoder": spec, "bits_per_client": f["bits_per_client"], _metric_name(m): _metric(m),
            "train_loss": f["train_loss"], "epsilon_total": f["epsilon_total"], "wall_s": f["wall_s"],
            **({"setup_s": f["setup_s"]} if "setup_s" in f else {})}


def _randomness_line(base: RunConfig) -> str:
    """What the table's ε means for this run's randomness mode (and that train_loss is a diagnostic)."""
    note = ("randomness=secure: the client keys and the server's sampling came from OS CSPRNGs"
            if base.randomness == "secure" else REPRODUCIBLE_WARNING)
    return f"\n{note}.  train_loss is a non-private simulation diagnostic (pooled private training data).\n"


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


def plot_comparison(results: dict[str, dict[str, Any]], path: Path, base: RunConfig) -> Any:
    """``comparison.png`` (:func:`sstq_fl.plots.plot_comparison`; matplotlib is imported only when plotting)."""
    from ..plots import plot_comparison as plot

    return plot(results, path, vars(base))
