"""Collect a DP-MEPF sweep's metrics.json files into sweep_<profile>.json and a markdown table."""

import json
import sys
from pathlib import Path

from sstq_fl.io import atomic_write_bytes, atomic_write_json, run_meta


def main(root: str, profile: str) -> None:
    rows = []
    for d in sorted(Path(root).glob(f"{profile}_*")):
        if not (d / "metrics.json").exists():
            continue
        m = json.loads((d / "metrics.json").read_text())
        rows.append({"run": d.name, "reference": m["reference"], "epsilon": m["epsilon"], "delta": m["delta"],
                     "sigma": m["sigma"], "downstream_accuracy": m["downstream_accuracy"], "domain_fd": m["domain_fd"],
                     "label_consistency": m["evaluation"]["domain_fd_detail"]["label_consistency"],
                     "records": m["records"], "clients": m["clients"], "wall_s": m["wall_s"]})
    order = {"public-only": 0}
    rows.sort(key=lambda r: (order.get(r["reference"].split(" ")[0], 1), r["epsilon"] if r["epsilon"] is not None else 1e9))
    atomic_write_json(Path(root) / f"sweep_{profile}.json", {"profile": profile, "rows": rows, "meta": run_meta(),
                                                              "command": f"TAG={profile} bash benchmarks/dp_mepf_sweep.sh"})
    lines = ["| run | epsilon | sigma | downstream accuracy | domain-FD* | label consistency | wall s |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = "inf" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
        sig = "-" if r["sigma"] is None else f"{r['sigma']:.3g}"
        lines.append(f"| {r['run']} | {eps} | {sig} | {r['downstream_accuracy']:.3f} | {r['domain_fd']:.1f} | "
                     f"{r['label_consistency']:.3f} | {r['wall_s']:.0f} |")
    lines.append("\n*domain-FD: Fréchet distance in an evaluation-only MNIST CNN's features; not comparable to Inception FID.")
    atomic_write_bytes(Path(root) / f"sweep_{profile}.md", ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu")
