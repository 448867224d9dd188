"""What the generative sweeps' table scripts share (``dp_mepf_table.py``, ``straightdp_table.py``,
``dp_vqg_table.py``): the releases of one cell, their mean and 95 % interval, and the calibration references.

* A **cell** is one configuration of a sweep; its **releases** are independent runs of it that differ only by
  ``--seed``, in run folders named ``<cell>_s<seed>`` (the sweep scripts' ``SEEDS="0 1 2"``).  A folder without
  the suffix is a cell with one release (older sweeps: n = 1, no interval).
* Each release's accuracy is already its mean over its probe seeds (``--probe-seeds``); a cell's value is the
  mean over its releases ± the half-width of a 95 % Student-t interval, ``t_{0.975, n−1} · s / √n``.
* The references of the evaluation (``probe_ceiling``: the same probe and protocol trained on real ``eval_fit``;
  ``fd_floor``: the domain-FD of real ``eval_fit`` against the real ``eval_score`` subset) sit beside the scores.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from scipy.stats import t as student_t

SEED_SUFFIX = re.compile(r"^(?P<cell>.+)_s(?P<seed>\d+)$")
REFERENCES = ("probe_ceiling", "fd_floor", "evaluator_accuracy")
CAPTION = ("Each value is the mean over the cell's independent releases (run folders <cell>_s<seed>, one per --seed; "
           "n of them) ± the half-width of a 95 % Student-t interval over the releases (none when n = 1); each "
           "release's accuracy is its own mean over its probe seeds. probe ceiling: the same probe and protocol "
           "trained on real eval_fit and tested on eval_score; FD floor: domain-FD of real eval_fit against the "
           "real eval_score subset the samples are compared with (eval_fit, eval_score: halves of the held-out "
           "priv_test). Runs written before the held-out evaluation show '-' for both.")


RELATIONS = {"replace_one": "replace-one", "add_or_remove_one": "add/remove-one"}


def relation_sentence(rows: Sequence[dict[str, Any]]) -> str:
    """What a sweep table says of its ε: the neighbouring relation it is stated under (each run's ``relation``),
    so that a reader does not compare it with another pipeline's ε under the other relation.  Runs under two
    relations are refused: one ε column would mix them."""
    found = sorted({r["relation"] for r in rows if r.get("relation")})
    if len(found) > 1:
        raise ValueError(f"relation_sentence: runs under {found}; one table's ε is under one relation")
    if not found:
        return "ε: record-level; the runs do not record their neighbouring relation."
    name = RELATIONS.get(found[0], found[0])
    return f"ε: record-level, under {name} neighbours (every run of this table)."


def cell_of(run: str) -> tuple[str, int | None]:
    """A run folder's cell and release seed: ``cpu_eps1_s2`` → ``("cpu_eps1", 2)``; no suffix → ``(run, None)``."""
    m = SEED_SUFFIX.match(run)
    return (m["cell"], int(m["seed"])) if m else (run, None)


def reference_fields(m: dict[str, Any]) -> dict[str, Any]:
    """A run's references and probe from its ``metrics.json`` (``None`` where the run predates them)."""
    probe = (m.get("evaluation") or {}).get("probe") or {}
    label = (f"{probe['probe']} ({probe['protocol']}, {probe['epochs']} epochs, {len(probe['seeds'])} probe seed(s))"
             if probe else None)
    return {**{k: m.get(k) for k in REFERENCES}, "probe": label}


def mean_ci(values: Sequence[Any]) -> tuple[float | None, float | None, int]:
    """Mean, 95 % Student-t half-width (``None`` for fewer than two values) and count of the finite values."""
    v = [float(x) for x in values if isinstance(x, int | float) and math.isfinite(x)]
    if not v:
        return None, None, 0
    mean = sum(v) / len(v)
    if len(v) < 2:
        return mean, None, len(v)
    s = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1))
    return mean, float(student_t.ppf(0.975, len(v) - 1)) * s / math.sqrt(len(v)), len(v)


def group(rows: list[dict[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """One row per cell (in order of first appearance): the last release's other fields, and for each of
    ``keys`` (and the references) its mean over the releases, ``<key>_ci`` and ``n`` (the releases).  Runs of
    one cell under different probes or protocols (an older evaluation among them) are different rows."""
    cells: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((cell_of(r["run"])[0], r.get("probe")), []).append(r)
    out = []
    for (cell, _), mine in cells.items():
        g = {**mine[-1], "run": cell, "n": len(mine), "runs": [r["run"] for r in mine],
             "seeds": [cell_of(r["run"])[1] for r in mine]}
        for k in (*keys, *REFERENCES):
            g[k], g[f"{k}_ci"], _ = mean_ci([r.get(k) for r in mine])
        out.append(g)
    return out


def main_probe(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the sweep's main probe and protocol (the most common label among ``rows``): a plot draws one
    probe, so another probe's rows (its own ceiling) never join a line; the tables show every probe."""
    label = Counter(r.get("probe") for r in rows).most_common(1)[0][0] if rows else None
    return [r for r in rows if r.get("probe") == label]


def plotted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a plot draws: where a sweep mixes runs of the held-out evaluation with older ones (no probe
    recorded; another evaluator, so their domain-FD is on another scale), the held-out ones only."""
    new = [r for r in rows if r.get("probe")]
    return new or rows


def fmt_ci(r: dict[str, Any], key: str, spec: str) -> str:
    """``mean ± half`` (``mean`` alone for one release, ``-`` when absent)."""
    mean, half = r.get(key), r.get(f"{key}_ci")
    if mean is None:
        return "-"
    return format(mean, spec) + (f" ± {format(half, spec)}" if half is not None else "")


def references(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The sweep's references for its plots: the mean over the runs of ``probe_ceiling`` and ``fd_floor``."""
    return {k: mean_ci([r.get(k) for r in rows])[0] for k in ("probe_ceiling", "fd_floor")}


def probe_facts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a plot title says of the probe: the probe(s) and protocol(s) of the runs, and how many runs are
    plotted where older ones are left out (:func:`plotted`)."""
    probes = sorted({r["probe"] for r in rows if r.get("probe")})
    new = sum(1 for r in rows if r.get("probe"))
    return {"probe": "; ".join(probes) or "lenet (cpu protocol, before the held-out evaluation)",
            "plotted runs (held-out evaluation)": new if 0 < new < len(rows) else None}


def pivot(cells: list[dict[str, Any]], label: Callable[[dict[str, Any]], str], column: Callable[[dict[str, Any]], str],
          entry: Callable[[dict[str, Any]], str], columns: Sequence[str], corner: str = "row") -> str:
    """A reader's table of a sweep: one line per ``label(cell)`` (in the cells' order), one column per name in
    ``columns`` (a cell goes under ``column(cell)``), ``entry(cell)`` in each, ``–`` where the sweep has no
    such cell.  Two cells under one line and column are an error: the table would hide one of them."""
    grid: dict[str, dict[str, str]] = {}
    for c in cells:
        row, col = label(c), column(c)
        if col not in columns:
            raise ValueError(f"pivot: cell {c['run']} has column {col!r}, not one of {list(columns)}")
        if col in grid.setdefault(row, {}):
            raise ValueError(f"pivot: two cells at ({row}, {col}); the second is {c['run']}")
        grid[row][col] = entry(c)
    lines = [f"| {corner} | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    lines += [f"| {row} | " + " | ".join(mine.get(col, "–") for col in columns) + " |" for row, mine in grid.items()]
    return "\n".join(lines) + "\n"
