"""The table of a ``benchmarks/gpu_full.sh`` run: one row per job (its status from ``jobs.jsonl``, its metrics from
``<job>/metrics.json`` when it finished), under the machine named in ``machine.json``.

The pipelines state ε under different neighbouring relations (DP-MEPF and DP-VQG replace-one, StraightDP
add/remove-one), so each row names its ``relation`` beside its ε, and ``ε replace-one`` restates every row under
replace-one (the run's data-set ledger, one ledger per job) so that rows of different pipelines can be compared.
A non-private job (``--epsilon inf``) shows ε as ``∞ (not DP)``.

Usage: ``python benchmarks/gpu_full_table.py OUT`` writes ``OUT/gpu_full.md`` and ``OUT/gpu_full.json``
(atomically) and prints the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from sstq_fl.io import atomic_write_bytes, atomic_write_json

COLUMNS = ("job", "status", "relation", "ε (ledger, its relation)", "ε replace-one", "accuracy", "probe ceiling",
           "label agreement", "domain-FD", "FD floor", "wall s")
RELATIONS = {"replace_one": "replace-one", "add_or_remove_one": "add/remove-one"}


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def _row(job: dict[str, Any], out: Path) -> dict[str, Any]:
    path = out / job["job"] / "metrics.json"
    m = json.loads(path.read_text()) if job["status"] == "ok" and path.is_file() else {}
    ledger = m.get("dataset_ledger") or {}
    return {"job": job["job"], "status": job["status"], "relation": m.get("relation"), "reference": m.get("reference"),
            "epsilon": m.get("epsilon"), "epsilon_replace_one": ledger.get("epsilon_replace_one"),
            "accuracy": m.get("downstream_accuracy"), "probe_ceiling": m.get("probe_ceiling"),
            "label_agreement": m.get("sample_label_agreement"), "domain_fd": m.get("domain_fd"),
            "fd_floor": m.get("fd_floor"), "wall_s": job["wall_s"]}


def _eps(r: dict[str, Any], key: str) -> str:
    """An ε cell: ``∞ (not DP)`` for a finished non-private run (its metrics write ε as ``null``)."""
    if r[key] is None and str(r.get("reference") or "").startswith("non-private"):
        return "∞ (not DP)"
    return _fmt(r[key])


def table(out: Path) -> tuple[str, dict[str, Any]]:
    """The markdown table and the JSON of the run in ``out``."""
    machine = json.loads((out / "machine.json").read_text())
    jobs = [json.loads(line) for line in (out / "jobs.jsonl").read_text().splitlines() if line.strip()]
    rows = [_row(j, out) for j in jobs]
    lines = [f"GPU run on {machine.get('gpu') or 'CPU (SCALE=' + str(machine.get('scale')) + ')'}, torch "
             f"{machine.get('torch')}, commit {str(machine.get('commit'))[:7]}", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [r["job"], r["status"], RELATIONS.get(r["relation"], _fmt(r["relation"])), _eps(r, "epsilon"),
                 _eps(r, "epsilon_replace_one"), _fmt(r["accuracy"]), _fmt(r["probe_ceiling"]),
                 _fmt(r["label_agreement"], 3), _fmt(r["domain_fd"]), _fmt(r["fd_floor"]), str(r["wall_s"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "ε is record-level at each run's δ under its pipeline's neighbouring relation (DP-MEPF, DP-VQG: "
              "replace-one; StraightDP: add/remove-one); ε replace-one restates it under replace-one (the run's "
              "data-set ledger), the column to compare across pipelines. Domain-FD is not comparable to Inception FID; "
              "every run is one release (its own data-set ledger)."]
    return "\n".join(lines) + "\n", {"machine": machine, "rows": rows}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0], "jobs.jsonl").is_file():
        print("usage: gpu_full_table.py OUT (a folder written by benchmarks/gpu_full.sh)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    md, data = table(out)
    atomic_write_bytes(out / "gpu_full.md", md.encode())
    atomic_write_json(out / "gpu_full.json", data)
    print(md, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
