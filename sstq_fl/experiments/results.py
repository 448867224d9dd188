"""A sweep's results as a tidy table, and their aggregates over seeds.

``results.csv`` / ``results.json``: one row per cell and round (its ``[[cell]]`` name where the file names
cells, encoder, its parameters, its privacy, ε, b, seed, trust and threat model, the grid's other values, bits
per client, the metric, training loss, ε spent, the trusted stage's central ε).
``aggregates.csv``: per group of cells that differ only in their seed, and per round, the mean,
standard deviation and an interval over seeds (:mod:`sstq_fl.intervals`; by default the 95 % Student-t interval
``mean ± t₀.₉₇₅,ₙ₋₁ · s/√n``; none for one seed), its kind in the ``interval`` column (``t95``, ``se``,
``none``) and its bounds in ``<value>_ci_low`` / ``<value>_ci_high``; ``final.csv`` the same at the last round.
``trust.csv`` / ``trust.md``: the final rows side by side by trust model (:func:`trust_rows`): each group's
threat model, central ε (for a run without a trusted stage, ``trust = "server"``, its local ε composed over
the rounds: the guarantee against the server, marked so), bits per client per round and final metric.
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
from ..intervals import NAMES as INTERVAL_NAMES
from ..intervals import bounds
from ..io import atomic_write_bytes, atomic_write_json, finite_json
from .spec import Cell, key_name, run_defaults

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
IDENTITY = ("encoder", "epsilon", "seed", "trust")
"""The fields :func:`identity` gives a column of its own (not repeated among the grid's other values)."""
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
    """The columns that say what a cell ran: task, encoder (name, parameters, spec, privacy), ε, b, seed, trust;
    ``epsilon`` is the configured one, which a non-private encoder does not use (``encoder_privacy`` says so)."""
    name, params = parse_spec(cell.cfg.encoder)
    b = next((params[p] for p in BIT_PARAMS if p in params), "")
    return {"task": cell.cfg.task, "encoder": name, "encoder_params": ",".join(f"{k}={v}" for k, v in params.items()),
            "encoder_spec": cell.cfg.encoder, "encoder_privacy": privacy_label(cell.cfg.encoder),
            "epsilon": cell.cfg.epsilon, "b": b, "seed": cell.cfg.seed, "trust": getattr(cell.cfg, "trust", "server")}


def threat_model(final: dict[str, Any]) -> str | None:
    """A run's threat model in short (the text before its first colon): its trusted stage's (``final.epsilon_central``),
    else its local ledger's (``identified`` for ``trust = "server"``); None for a run that records neither."""
    central = final.get("epsilon_central")
    text = central.get("threat_model") if isinstance(central, dict) else final.get("epsilon_threat_model")
    return str(text).split(":")[0].strip() if text else None


def cell_rows(cell: Cell, folder: Path, keys: Sequence[str] | None = None, named: bool = False) -> list[dict[str, Any]]:
    """One row per round of a finished cell: its completed run of exactly its config (none otherwise: a
    failed cell, or another config's run left in its folder).  ``keys``: the grid's fields that get a column
    (default: the cell's own values; a field the cell does not set reads its config's value); ``named``: a
    ``name`` column (the cell's ``[[cell]]`` name, None where it has none)."""
    m = completed_metrics(folder, cell.cfg)
    if m is None:
        return []
    rounds = m.get("rounds", [])
    metric = metric_name(rounds)
    keys = list(cell.values) if keys is None else keys
    extra = {key_name(k): cell.values.get(k, getattr(cell.cfg, k, None)) for k in keys if k not in IDENTITY}
    head = {"cell": cell.name, **({"name": cell.label or None} if named else {}), **identity(cell),
            "threat_model": threat_model(m.get("final", {})), **extra}
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


def aggregate(rows: Sequence[dict[str, Any]], interval: str = "t95") -> list[dict[str, Any]]:
    """Per group (cells equal but for the seed) and round: n, the interval's kind, and the mean, sd and
    interval of each summarised value (:func:`sstq_fl.intervals.bounds`)."""
    cols = group_columns(rows)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((*(str(r[c]) for c in cols), r["round"]), []).append(r)
    out = []
    for members in groups.values():
        first = members[0]
        agg: dict[str, Any] = {**{c: first[c] for c in cols}, "round": first["round"], "metric_name": first["metric_name"],
                               "seeds": len(members), "interval": interval}
        for key in SUMMARISED:
            vals = [float(r[key]) for r in members if _finite(r.get(key))]
            if vals:
                mean, sd, _, _ = t_interval(vals)
                low, high = bounds(mean, sd, len(vals), interval)
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
    """Write ``results.csv``/``.json``, ``aggregates.csv``, ``final.csv`` and ``trust.csv``/``.md`` into ``out``;
    return the JSON (``header``'s ``interval``: the kind of interval the tables hold, default ``t95``).
    Every row has the same columns: the grid's fields (every cell's values, in first-seen order)
    and a ``name`` column where any cell is named."""
    keys = list(dict.fromkeys(k for c in cells for k in c.values))
    named = any(c.label for c in cells)
    rows = [r for cell, folder in zip(cells, folders) for r in cell_rows(cell, folder, keys, named)]
    aggs = aggregate(rows, str(header.get("interval", "t95")))
    finals = final_rows(aggs)
    doc = {**header, "non_private_diagnostics": NON_PRIVATE_FIELDS, "rows": rows, "aggregates": aggs, "final": finals}
    atomic_write_bytes(out / "results.csv", to_csv(rows))
    atomic_write_bytes(out / "aggregates.csv", to_csv(aggs))
    atomic_write_bytes(out / "final.csv", to_csv(finals))
    table = trust_rows(finals)
    atomic_write_bytes(out / "trust.csv", to_csv(table))
    atomic_write_bytes(out / "trust.md", trust_markdown(table, doc).encode())
    atomic_write_json(out / "results.json", doc)
    return doc


# ----------------------------------------------------------------------------- trust models side by side
LOCAL_CENTRAL = "local ε composed (no trusted stage)"
"""What ``central_epsilon_is`` says of a run without a trusted stage's ledger (``trust = "server"``)."""
LEDGER_CENTRAL = "trusted stage's ledger"
TRUST_FOOTNOTE = ("† no trusted stage (trust = server, threat model identified): the central ε against the server is "
                  "the run's local ε composed over its rounds (epsilon_spent), the guarantee against the server itself; "
                  "a non-private encoder has none (∞).")
NOT_NAMING = ("round", "seeds", "metric_name", "name", "threat_model", "encoder", "encoder_params", "encoder_privacy", "b")
"""Columns a derived cell name never uses (the encoder is named by its spec)."""
SHOWN = ("encoder_spec", "epsilon", "trust")
"""Columns the trust table shows besides the name."""


def central_epsilon(a: dict[str, Any]) -> tuple[float | None, str]:
    """A final row's central ε and what it is: the trusted stage's ledger (``epsilon_central_mean``), else the local
    ε composed over the rounds (``epsilon_spent_mean``; ∞ for a non-private encoder) for a run without a
    trusted stage; ``(None, "")`` for a row that records neither (a table written before trust was recorded)."""
    if _finite(a.get("epsilon_central_mean")):
        return float(a["epsilon_central_mean"]), LEDGER_CENTRAL
    if a.get("trust") is None:
        return None, ""
    if _finite(a.get("epsilon_spent_mean")):
        return float(a["epsilon_spent_mean"]), LOCAL_CENTRAL
    return math.inf, LOCAL_CENTRAL


def derived_names(finals: Sequence[dict[str, Any]]) -> list[str]:
    """Each final row's name: its ``[[cell]]`` name, else ``key=value`` of the grid values that differ between the
    rows besides those the trust table shows in columns of their own (encoder, ε, trust; never the seed), each
    left out where it is the run's default; else ``encoder (trust)``."""
    cols = [c for c in group_columns_of(finals) if c not in NOT_NAMING + SHOWN]
    differ = [c for c in cols if len({str(a.get(c)) for a in finals}) > 1]
    defaults = {key_name(k): v for k, v in run_defaults().items()}
    out = []
    for a in finals:
        pairs = [f"{c}={_text(a.get(c))}" for c in differ if c not in defaults or str(a.get(c)) != str(defaults[c])]
        out.append(str(a["name"]) if a.get("name") else ", ".join(pairs) or f"{a.get('encoder_spec')} ({a.get('trust')})")
    return out


def group_columns_of(finals: Sequence[dict[str, Any]]) -> list[str]:
    """A final row's group columns (those before ``round``)."""
    if not finals:
        return []
    cols = list(finals[0])
    return cols[: cols.index("round")] if "round" in cols else cols


def trust_rows(finals: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The final rows by trust model (in first-seen order), then encoder and central ε: name, trust, threat model,
    encoder, its privacy, per-message ε, central ε and what it is (:func:`central_epsilon`), bits per client per
    round, the final metric with its interval over seeds (its kind in ``interval``; none for one seed) and the
    number of seeds."""
    names = derived_names(finals)
    order = {t: i for i, t in enumerate(dict.fromkeys(str(a.get("trust")) for a in finals))}
    out = []
    for name, a in zip(names, finals):
        central, what = central_epsilon(a)
        out.append({"name": name, "trust": a.get("trust"), "threat_model": a.get("threat_model"),
                    "encoder_spec": a.get("encoder_spec"), "encoder_privacy": a.get("encoder_privacy"),
                    "epsilon": a.get("epsilon"), "central_epsilon": central, "central_epsilon_is": what,
                    "bits_per_client": a.get("bits_per_client_mean"), "metric_name": a.get("metric_name"),
                    "metric_mean": a.get("metric_mean"), "metric_ci_low": a.get("metric_ci_low"),
                    "metric_ci_high": a.get("metric_ci_high"), "interval": a.get("interval", "t95"),
                    "seeds": a.get("seeds")})
    out.sort(key=lambda r: (order[str(r["trust"])], str(r["encoder_spec"]),
                            math.inf if r["central_epsilon"] is None else r["central_epsilon"]))
    return out


def trust_markdown(rows: Sequence[dict[str, Any]], doc: dict[str, Any] | None = None) -> str:
    """:func:`trust_rows` as a markdown table under a line saying what produced it, with its footnotes."""
    exp = (doc or {}).get("experiment") or {}
    metric = str(rows[0]["metric_name"]).replace("_", " ") if rows else "metric"
    seeds = sorted({int(r["seeds"]) for r in rows if r.get("seeds") is not None})
    file = Path(str(exp["file"])).name if exp.get("file") else ""
    what = str(exp.get("title") or file or "sweep") + (f" ({file})" if file and file != exp.get("title") else "")
    kind = INTERVAL_NAMES[str(rows[0].get("interval") or "t95")] if rows else INTERVAL_NAMES["t95"]
    head = [f"{what}: final {metric} by trust model; mean and {kind} over seeds (none for one seed)", "",
            f"| cell | trust | threat model | encoder | ε per message | central ε | bits/client/round | {metric} "
            f"[{kind}] | seeds |", "|---|---|---|---|---|---|---|---|---|"]
    local = False
    for r in rows:
        private = r.get("encoder_privacy") in (None, LDP_LABEL)
        local_eps = _text(r["epsilon"]) if private else f"– ({r['encoder_privacy']}; set {_text(r['epsilon'])})"
        central = "–" if r["central_epsilon"] is None else "∞" if r["central_epsilon"] == math.inf else \
            f"{r['central_epsilon']:.4g}"
        if r["central_epsilon_is"] == LOCAL_CENTRAL:
            central, local = central + " †", True
        mean, low, high = r.get("metric_mean"), r.get("metric_ci_low"), r.get("metric_ci_high")
        value = "–" if not _finite(mean) else f"{mean:.4g}" + (f" [{low:.4g}, {high:.4g}]" if _finite(low) and
                                                                _finite(high) else "")
        head.append(f"| {r['name']} | {_text(r['trust'])} | {_text(r['threat_model'])} | `{r['encoder_spec']}` | "
                    f"{local_eps} | {central} | "
                    f"{_text(r['bits_per_client'])} | {value} | {_text(r['seeds'])} |")
    notes = [TRUST_FOOTNOTE] if local else []
    if seeds and seeds[0] == 1:
        notes.append("A row of 1 seed has no interval.")
    return "\n".join(head + ([""] + notes if notes else [])) + "\n"


def _text(v: Any) -> str:
    """A table cell: a float in 4 significant digits, None as ``–``."""
    if v is None:
        return "–"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


RESULT_FIELDS: dict[str, type] = {"experiment": dict, "fixed": dict, "axes": dict, "task_params": dict, "overrides": dict,
                                  "cell_tables": list, "exclude": list, "non_private_diagnostics": dict, "rows": list,
                                  "interval": str,
                                  "aggregates": list, "final": list}
"""The fields of a ``results.json`` and their JSON types (``rows``, ``aggregates`` and ``final`` required)."""


def _json_type(kind: type) -> str:
    return "object" if kind is dict else "array" if kind is list else "string"


def checked_results(doc: Any) -> dict[str, Any]:
    """``doc`` if it is a results document whose fields have their types and whose ``aggregates`` and ``final``
    rows are what its ``rows`` give (:func:`aggregate`, :func:`final_rows`); else a one-line ``ValueError``."""
    if not isinstance(doc, dict):
        raise ValueError(f"a JSON {type(doc).__name__}, not an object")
    for key, kind in RESULT_FIELDS.items():
        if key in doc and not isinstance(doc[key], kind) or key in ("rows", "aggregates", "final") and key not in doc:
            raise ValueError(f"{key!r} is {type(doc.get(key)).__name__}, not a JSON {_json_type(kind)}")
    if not all(isinstance(r, dict) for r in doc["rows"]):
        raise ValueError("'rows' holds an entry that is not an object")
    try:
        aggs = aggregate(doc["rows"], str(doc.get("interval", "t95")))
        if doc["aggregates"] and "interval" not in doc["aggregates"][0]:  # written before the interval was named
            aggs = [{k: v for k, v in a.items() if k != "interval"} for a in aggs]
        final = final_rows(aggs)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"its rows are not a sweep's rows ({type(exc).__name__}: {exc})") from None
    if finite_json(aggs) != doc["aggregates"] or finite_json(final) != doc["final"]:
        raise ValueError("its aggregates or final rows are not what its rows give (an edited file?)")
    return doc
