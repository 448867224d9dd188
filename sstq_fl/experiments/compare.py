"""``sstq-fl compare``: several encoders on identical batches, curves and a bits/accuracy table.

A thin front end of the sweep runner (:mod:`sstq_fl.experiments.runner`): a grid of one axis, the
encoder, each cell in ``OUT/<encoder>``, run one after another in this process (a bar over each
run's rounds) or, on the Flower engine, in one Flower simulation.  Besides the sweep's tables and
figures (``results.csv``, ``aggregates.csv``, ``final.csv``, ``results.json``, ``rounds``/``bits``
``.png``/``.pdf``) it writes ``comparison.json``, ``comparison.md`` and ``comparison.png``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..config.train import RunConfig
from ..fl.checkpoint import read_checkpoint
from ..fl.engine import existing_outputs, trainers
from ..io import atomic_write_bytes, atomic_write_json, clean_temps, clear_out, mark_kind, refuse_other_kind, run_meta
from ..placement import Placement
from ..rng import REPRODUCIBLE_WARNING
from .figures import plot_all
from .results import (
    LDP_LABEL,
    LEDGER_CENTRAL,
    LOCAL_CENTRAL,
    TRUST_FOOTNOTE,
    metric_name,
    privacy_label,
    threat_model,
    write_tables,
)
from .runner import CellResult, LocalExecutor, pending_jobs, run_flower_cells
from .spec import Cell, Experiment, unique

COMPARISON_FILES = ("comparison.json", "comparison.md", "comparison.png", "results.csv", "results.json",
                    "aggregates.csv", "final.csv", "trust.csv", "trust.md")


def _slug(spec: str) -> str:
    return spec.replace(":", "_").replace(",", "_").replace("=", "-")


def prepare_out(cells: list[Cell], out: Path, resume: bool, force: bool) -> None:
    """Check ``out`` before anything is trained.

    Without ``resume``, a folder holding a previous comparison's files (for these encoders) is
    refused unless ``force`` (then those files are removed).  With ``resume``, at least one
    encoder's run must be there (started: its checkpoint, made with this config; or complete)."""
    refuse_other_kind(out, "comparison")
    clean_temps(out, everything=resume)
    if not resume:
        files = existing_outputs(out, COMPARISON_FILES) + [f for c in cells for f in existing_outputs(out / c.name)]
        clear_out(files, out, force)
        mark_kind(out, "comparison")
        return
    started = [c for c in cells if (out / c.name / "checkpoint.json").is_file()]
    complete = [c for c in cells if (out / c.name / "metrics.json").is_file() and c not in started]
    if not started and not complete:
        raise ValueError(f"--resume: no checkpoint in {out} (nothing to resume; run without --resume)")
    for c in started:
        t = int(read_checkpoint(out / c.name, c.cfg)["round"])
        print(f"resuming {c.cfg.encoder} from round {t} of {c.cfg.rounds} in {out / c.name}", flush=True)


def compare_experiment(base: RunConfig, encoders: list[str]) -> Experiment:
    """The comparison as an experiment: ``base``'s values fixed, the encoders its one axis."""
    fixed = {k: v for k, v in asdict(base).items() if k != "encoder"}
    digest = hashlib.sha256(json.dumps([fixed, encoders], sort_keys=True).encode()).hexdigest()
    return Experiment(None, digest, "sstq-fl compare", fixed, {"encoder": list(encoders)})


def compare(base: RunConfig, encoders: list[str], out: str | Path, resume: bool = False, force: bool = False,
            experiment: Experiment | None = None, keep_checkpoints: bool = False, interval: str | None = None,
            log_to: str | None = None, placement: Placement | None = None) -> dict[str, Any]:
    """Train every encoder on identical batches into ``out``/<encoder>; write the tables and plots.

    Every spec is checked (its trainer built) and ``out`` is checked (:func:`prepare_out`)
    before the first round is trained; nothing is written if either check fails.  ``experiment``:
    the file the comparison's values came from (``--config``), recorded with each run; ``interval``: the interval
    over seeds of the tables and figures (default: the file's ``[experiment] interval``, else ``t95``); ``log_to``:
    each encoder's published metrics also go to this tracker (:mod:`sstq_fl.tracking`), a tracker run per encoder;
    ``placement``: where the Flower engine's simulation runs (:class:`~sstq_fl.placement.Placement`)."""
    from .preflight import check_distinct_encoders

    out = Path(out)
    check_distinct_encoders(encoders, "--encoders")
    built = trainers(base, encoders)
    for t in built.values():
        t.keep_checkpoints, t.log_to = keep_checkpoints, log_to
    taken: set[str] = set()
    cells = [Cell(unique(_slug(s), taken), {"encoder": s}, replace(base, encoder=s)) for s in encoders]
    prepare_out(cells, out, resume, force)
    exp = experiment or compare_experiment(base, encoders)
    results = _run(cells, out, built, resume, keep_checkpoints, exp.provenance(), log_to, placement)
    rows = [_row(s, results[s]) for s in encoders]
    summary = {"config": {k: v for k, v in vars(base).items() if k != "encoder"}, "rows": rows, "meta": run_meta(),
               "experiment": exp.provenance()}
    atomic_write_json(out / "comparison.json", summary)
    atomic_write_bytes(out / "comparison.md", (markdown(rows) + _trust_line(rows) + _randomness_line(base)).encode())
    plot_comparison(results, out / "comparison.png", base)
    doc = write_tables(out, cells, [out / c.name for c in cells], {"experiment": exp.provenance(), "fixed": exp.fixed,
                                                                   "axes": exp.axes,
                                                                   "interval": interval or exp.interval or "t95"})
    plot_all(doc, out)
    return summary


def _run(cells: list[Cell], out: Path, built: dict[str, Any], resume: bool, keep: bool,
         provenance: dict[str, Any], log_to: str | None = None, placement: Placement | None = None
         ) -> dict[str, dict[str, Any]]:
    """Run the cells (complete ones skipped), a line as each ends; return every encoder's metrics."""
    from ..progress import progress

    with progress(len(cells), "encoders", every=1) as bar:
        def report(r: CellResult) -> None:  # a failing encoder raises (raise_errors): every report is a result
            print(f"  {r.line()}", flush=True)
            bar.advance(encoder=r.name)

        jobs = pending_jobs([(c, out / c.name) for c in cells], report) if resume else [(c, out / c.name) for c in cells]
        if jobs and cells[0].cfg.engine == "flower":
            run_flower_cells(jobs, resume, keep, provenance, report, raise_errors=True, log_to=log_to,
                             placement=placement)
        elif jobs:
            LocalExecutor(trainers={c.name: built[c.cfg.encoder] for c, _ in jobs}, raise_errors=True).run(
                jobs, resume, keep, provenance, report)
    return {c.cfg.encoder: json.loads((out / c.name / "metrics.json").read_text()) for c in cells}


def _row(spec: str, m: dict[str, Any]) -> dict[str, Any]:
    """One encoder's table row; ``wall_s`` counts the rounds, ``setup_s`` the untimed warm-up before them.
    ``metrics.json`` stores a non-private run's ``ε = ∞`` as null (strict JSON), which the row restores;
    ``encoder_privacy`` names it (``ε-LDP``, or e.g. ``non-private (compression only)``: no ε).  Then whom the
    clients trust, the threat model in short and the central ε: the trusted stage's, else (``trust = "server"``)
    the local ε composed, ``epsilon_total`` (``central_epsilon_is`` says which)."""
    f = m["final"]
    eps = math.inf if f["epsilon_total"] is None else f["epsilon_total"]
    central = f.get("epsilon_central")
    ledger = isinstance(central, dict) and central.get("epsilon") is not None
    return {"encoder": spec, "bits_per_client": f["bits_per_client"], _metric_name(m): _metric(m),
            "train_loss": f.get("train_loss"), "epsilon_total": eps, "encoder_privacy": privacy_label(spec),
            "wall_s": f["wall_s"],
            **({"setup_s": f["setup_s"]} if "setup_s" in f else {}),
            "trust": m.get("config", {}).get("trust", "server"), "threat_model": threat_model(f),
            "epsilon_central": float(central["epsilon"]) if ledger else eps,
            "central_epsilon_is": LEDGER_CENTRAL if ledger else LOCAL_CENTRAL}


def _trust_line(rows: list[dict[str, Any]]) -> str:
    """The table's footnote on ``epsilon_central`` where a row has no trusted stage."""
    return f"\n{TRUST_FOOTNOTE.lstrip('† ')}\n" if any(r["central_epsilon_is"] == LOCAL_CENTRAL for r in rows) else ""


def _randomness_line(base: RunConfig) -> str:
    """What the table's ε means for this run's randomness mode (and that train_loss is a diagnostic)."""
    note = ("randomness=secure: the client keys and the server's sampling came from OS CSPRNGs"
            if base.randomness == "secure" else REPRODUCIBLE_WARNING)
    loss = ("train_loss is not published in secure mode (pooled private training data)" if base.randomness == "secure"
            else "train_loss is a non-private simulation diagnostic (pooled private training data)")
    return f"\n{note}.  {loss}.\n"


def _metric_name(m: dict[str, Any]) -> str:
    return metric_name(m["rounds"])


def _metric(m: dict[str, Any]) -> float:
    return float(m["final"][_metric_name(m)])


def markdown(rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def plot_comparison(results: dict[str, dict[str, Any]], path: Path, base: RunConfig) -> Any:
    """``comparison.png`` (:func:`sstq_fl.plots.plot_comparison`; matplotlib is imported only when plotting), the
    non-private encoders' ε lines labelled with their privacy (e.g. ``non-private (compression only)``)."""
    from ..plots import plot_comparison as plot

    labels = {s: privacy_label(s) for s in results}
    return plot(results, path, vars(base), privacy={s: lab for s, lab in labels.items() if lab != LDP_LABEL})
