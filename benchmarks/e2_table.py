"""E2 table: each encoder's ‖θ_T − θ*‖² and its ratio to clean's at the same round, per (d, b).

Usage: ``python benchmarks/e2_table.py benchmarks/results/e2_paper`` (reads ``d*_b*/comparison.json``,
writes ``ratios.md`` and ``ratios.json`` there, atomically)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from sstq_fl.io import atomic_write_bytes, atomic_write_json, run_meta


def _family(spec: str) -> str:
    """The spec without its bit width (``sstq-flat:b=4,codebook=optimized`` → ``sstq-flat:codebook=optimized``)."""
    name, _, params = spec.partition(":")
    rest = [p for p in params.split(",") if p and not p.startswith("b=")]
    return name + (":" + ",".join(rest) if rest else "")


def collect(root: Path) -> list[dict[str, Any]]:
    """One row per (encoder, d, b): distance to θ* at the last round and its ratio to clean's."""
    rows = []
    for path in sorted(root.glob("d*_b*/comparison.json")):
        m = re.fullmatch(r"d(\d+)_b(\d+)", path.parent.name)
        if m is None:
            continue
        got = json.loads(path.read_text())["rows"]
        clean = next(r["distance_to_optimum"] for r in got if r["encoder"] == "clean")
        for r in got:
            rows.append({"encoder": _family(r["encoder"]), "d": int(m[1]), "b": int(m[2]),
                         "distance": r["distance_to_optimum"], "ratio_to_clean": r["distance_to_optimum"] / clean,
                         "bits_per_client": r["bits_per_client"]})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """Encoders down, (d, b) across; each cell ``ratio (distance)``."""
    cols = sorted({(r["d"], r["b"]) for r in rows})
    names = list(dict.fromkeys(r["encoder"] for r in rows))
    cell = {(r["encoder"], r["d"], r["b"]): r for r in rows}
    out = ["| encoder | " + " | ".join(f"d={d}, b={b}" for d, b in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for n in names:
        vals = [cell.get((n, d, b)) for d, b in cols]
        out.append(f"| {n} | " + " | ".join(f"{v['ratio_to_clean']:.3g} ({v['distance']:.4g})" if v else "–"
                                             for v in vals) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python benchmarks/e2_table.py RESULTS_DIR (a folder of d*_b*/comparison.json)", file=sys.stderr)
        return 2
    root = Path(argv[0])
    rows = collect(root)
    if not rows:
        print(f"error: no d*_b*/comparison.json under {root}", file=sys.stderr)
        return 2
    atomic_write_json(root / "ratios.json", {"rows": rows, "meta": run_meta()})
    atomic_write_bytes(root / "ratios.md", ("ratio to clean at round 100 (distance ‖θ_T − θ*‖²)\n\n" + markdown(rows)).encode())
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
