"""A sweep's results as a tidy table, and their aggregates over seeds.

``results.csv`` / ``results.json``: one row per cell and round (encoder, its parameters, its privacy, ε, b,
seed, the grid's other values, bits per client, the metric, training loss, ε spent).
``aggregates.csv``: per group of cells that differ only in their seed, and per round, the mean,
standard deviation and a 95 % Student-t interval over seeds,
``mean ± t₀.₉₇₅,ₙ₋₁ · s/√n`` (no interval for one seed); ``final.csv`` the same at the last round.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..encoders.base import ENCODERS, parse_spec
from ..fl.checkpoint import completed_metrics
from ..fl.engine import METRIC_KEYS, NON_PRIVATE_DIAGNOSTICS
from ..io import atomic_write_bytes, atomic_write_json, finite_json
from .spec import Cell, key_name

METRICS = METRIC_KEYS
"""The per-round quality metric, the first one a run records (:data:`sstq_fl.fl.engine.METRIC_KEYS`)."""
NON_PRIVATE_FIELDS = {"fields": ["train_loss", "metric where metric_name is distance_to_optimum (θ* is fitted on the "
                                                "pooled private data)"], "note": NON_PRIVATE_DIAGNOSTICS}
"""The table's columns no privacy guarantee covers (as in each run's ``metrics.json``)."""
ROUND_VALUES = ("bits_per_client", "train_loss", "epsilon_spent", "epsilon_central")
BIT_PARAMS = ("b", "b0", "bits")
"""The encoder parameter reported as ``b``: bits per label (SSTQ), the bit cap of SQKR's automatic ``k``, or
PrivUnit-MRC's index bits, the first a spec sets."""
SUMMARISED = ("metric", "train_loss", "epsilon_spent", "epsilon_central", "bits_per_client")
LDP_LABEL = "ε-LDP"
"""The ``encoder_privacy`` of a private encoder (its messages are ε-LDP at the cell's ``epsilon``)."""


def privacy_label(spec: str) -> str:
    """What a table says of an encoder's privacy: :data:`LDP_LABEL` for a private encoder, else the class's
    ``privacy_label`` (e.g. ``non-private (compression only)``) or ``non-private``: never an ε."""
    cls = ENCODERS[parse_spec(spec)[0]]
    return LDP_LABEL if cls.private else str(getattr(cls, "privacy_label", "non-private"))


def metric_name(rounds: Sequence[dict[str, Any]]) -> str:
    """The metric a run's rounds record (see :data:`METRICS`)."""
    for name in METRICS:
        if rounds and name in rounds[-1]:
            return name
    return "test_accuracy"


def identity(cell: Cell) -> dict[str, Any]:
    """The columns that say what a cell ran: task, encoder (name, parameters, spec, privacy), ε, b, seed; ``epsilon``
    is the configured one, which a non-private encoder does not use (``encoder_privacy`` says so)."""
    name, params = parse_spec(cell.cfg.encoder)
    b = next((params[p] for p in BIT_PARAMS if p in params), "")
    return {"task": cell.cfg.task, "encoder": name, "encoder_params": ",".join(f"{k}={v}" for k, v in params.items()),
            "encoder_spec": cell.cfg.encoder, "encoder_privacy": privacy_label(cell.cfg.encoder),
            "epsilon": cell.cfg.epsilon, "b": b, "seed": cell.cfg.seed}


def cell_rows(cell: Cell, folder: Path) -> list[dict[str, Any]]:
    """One row per round of a finished cell: its completed run of exactly its config (none otherwise: a
    failed cell, or another config's run left in its folder)."""
    m = completed_metrics(folder, cell.cfg)
    if m is None:
        return []
    rounds = m.get("rounds", [])
    metric = metric_name(rounds)
    extra = {key_name(k): v for k, v in cell.values.items() if k not in ("encoder", "epsilon", "seed")}
    head = {"cell": cell.name, **identity(cell), **extra}
    return [{**head, "round": r["round"], "metric_name": metric, "metric": r.get(metric),
             **{k: r.get(k) for k in ROUND_VALUES}} for r in rounds]


def group_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The columns that tell a group of seeds apart: everything before ``round`` except cell and seed."""
    if not rows:
        return []
    cols = list(rows[0])
    return [c for c in cols[: cols.index("round")] if c not in ("cell", "seed")]


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float | None, float | None, float | None]:
    """``(mean, sd, low, high)``: the mean, the sample standard deviation and the Student-t interval
    at ``level`` over ``values`` (``sd``, ``low`` and ``high`` None for fewer than two values)."""
    from scipy.stats import t

    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None, None, None
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


def aggregate(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per group (cells equal but for the seed) and round: n, and the mean, sd and 95 % interval of each
    summarised value (:func:`t_interval`)."""
    cols = group_columns(rows)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((*(str(r[c]) for c in cols), r["round"]), []).append(r)
    out = []
    for members in groups.values():
        first = members[0]
        agg: dict[str, Any] = {**{c: first[c] for c in cols}, "round": first["round"], "metric_name": first["metric_name"],
                               "seeds": len(members)}
        for key in SUMMARISED:
            vals = [float(r[key]) for r in members if _finite(r.get(key))]
            if vals:
                mean, sd, low, high = t_interval(vals)
                agg.update({f"{key}_mean": mean, f"{key}_sd": sd, f"{key}_ci_low": low, f"{key}_ci_high": high})
        out.append(agg)
    return out


def final_rows(aggregates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each group's last round."""
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for a in aggregates:
        cols = list(a)
        key = tuple(str(a[c]) for c in cols[: cols.index("round")])  # the group's columns (see aggregate)
        if key not in last or a["round"] > last[key]["round"]:
            last[key] = a
    return list(last.values())


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def to_csv(rows: Iterable[dict[str, Any]]) -> bytes:
    """``rows`` as CSV (columns: the union, in first-seen order; missing values empty)."""
    rows = list(rows)
    cols = list(dict.fromkeys(c for r in rows for c in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: "" if r.get(c) is None else r[c] for c in cols})
    return buf.getvalue().encode()


def write_tables(out: Path, cells: Sequence[Cell], folders: Sequence[Path], header: dict[str, Any]) -> dict[str, Any]:
    """Write ``results.csv``/``.json``, ``aggregates.csv`` and ``final.csv`` into ``out``; return the JSON."""
    rows = [r for cell, folder in zip(cells, folders) for r in cell_rows(cell, folder)]
    aggs = aggregate(rows)
    finals = final_rows(aggs)
    doc = {**header, "non_private_diagnostics": NON_PRIVATE_FIELDS, "rows": rows, "aggregates": aggs, "final": finals}
    atomic_write_bytes(out / "results.csv", to_csv(rows))
    atomic_write_bytes(out / "aggregates.csv", to_csv(aggs))
    atomic_write_bytes(out / "final.csv", to_csv(finals))
    atomic_write_json(out / "results.json", doc)
    return doc


RESULT_FIELDS: dict[str, type] = {"experiment": dict, "fixed": dict, "axes": dict, "task_params": dict, "overrides": dict,
                                  "non_private_diagnostics": dict, "rows": list, "aggregates": list, "final": list}
"""The fields of a ``results.json`` and their JSON types (``rows``, ``aggregates`` and ``final`` required)."""


def checked_results(doc: Any) -> dict[str, Any]:
    """``doc`` if it is a results document whose fields have their types and whose ``aggregates`` and ``final``
    rows are what its ``rows`` give (:func:`aggregate`, :func:`final_rows`); else a one-line ``ValueError``."""
    if not isinstance(doc, dict):
        raise ValueError(f"a JSON {type(doc).__name__}, not an object")
    for key, kind in RESULT_FIELDS.items():
        if key in doc and not isinstance(doc[key], kind) or key in ("rows", "aggregates", "final") and key not in doc:
            raise ValueError(f"{key!r} is {type(doc.get(key)).__name__}, not a JSON {'object' if kind is dict else 'array'}")
    if not all(isinstance(r, dict) for r in doc["rows"]):
        raise ValueError("'rows' holds an entry that is not an object")
    try:
        aggs = aggregate(doc["rows"])
        final = final_rows(aggs)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"its rows are not a sweep's rows ({type(exc).__name__}: {exc})") from None
    if finite_json(aggs) != doc["aggregates"] or finite_json(final) != doc["final"]:
        raise ValueError("its aggregates or final rows are not what its rows give (an edited file?)")
    return doc
