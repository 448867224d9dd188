#!/usr/bin/env python3
"""Fixed cost of a short run: the wall time of a one-round, 10-client Fashion-MNIST ``sstq-fl run``.

Each timed run is a fresh process, ``sys.executable -m sstq_fl.cli run --task fmnist --clients 10
--rounds 1 ...`` with a warm data cache, so nearly all of it is start-up (imports, data, warm-up) and
the end (transcript, metrics, ``curves.png``, process exit).  With ``--reference TREE`` (another
checkout, e.g. ``git worktree add /tmp/ref <commit>``) the runs alternate between the two trees, so
both see the same machine load; the JSON gives every run's seconds and each tree's median.

Beside them stand three floors of this machine, each the median of ``--runs`` processes: an empty
interpreter, ``import torch`` (what any run pays), and ``import torch`` ended by ``os._exit`` (the
interpreter's teardown left out, as the console script does).

    .venv/bin/python benchmarks/short_run.py --runs 8 --reference /tmp/ref --out benchmarks/results/short_run.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUN = ["run", "--task", "fmnist", "--encoder", "sstq-flat:b=4", "--clients", "10", "--rounds", "1", "--force"]
FLOORS = {"python": "pass", "import torch": "import torch", "import torch, os._exit": "import torch, os; os._exit(0)"}
TARGET_S = 2.5


def timed(cmd: list[str], cwd: Path) -> float:
    """Seconds from start to end of the process ``cmd`` run in ``cwd`` with ``cwd`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def git_head(tree: Path) -> str:
    """``tree``'s commit, ``+changes`` where its tracked files differ from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=tree, capture_output=True,
                           text=True).stdout.strip()
    return (head.stdout.strip() or "unknown") + ("+changes" if dirty else "")


def measure(trees: dict[str, Path], runs: int, work: Path) -> dict[str, list[float]]:
    """``runs`` timed short runs per tree, alternating trees run by run, after each tree's bytecode is
    compiled (as a first run writes it, unless ``PYTHONDONTWRITEBYTECODE`` is set) and one untimed run
    (the data cache warmed)."""
    times: dict[str, list[float]] = {name: [] for name in trees}
    for tree in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", "sstq_fl"], cwd=tree, check=True,
                       stdout=subprocess.DEVNULL)
    for i in range(runs + 1):
        for name, tree in trees.items():
            s = timed([sys.executable, "-m", "sstq_fl.cli", *RUN, "--out", str(work / name)], tree)
            if i:
                times[name].append(s)
            print(f"{name} run {i}/{runs}: {s:.2f} s{' (untimed)' if not i else ''}", file=sys.stderr)
    return times


def summary(xs: list[float]) -> dict[str, Any]:
    return {"seconds": xs, "median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs)}


def plot(res: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure

    names = list(res["trees"]) + list(res["floors"])
    data = [res["trees"][n]["seconds"] for n in res["trees"]] + [res["floors"][n]["seconds"] for n in res["floors"]]
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.subplots()
    ax.boxplot(data, orientation="horizontal", tick_labels=[f"{n} ({res['commits'].get(n, 'floor')})" if n in res["trees"] else n
                                         for n in names])
    ax.axvline(TARGET_S, color="C3", ls="--", label=f"target {TARGET_S} s")
    ax.set_xlabel("wall seconds per process")
    ax.legend(fontsize=8)
    fig.suptitle(f"benchmarks/short_run.py: sstq-fl {' '.join(RUN[:-1])}, {res['runs']} runs per row, "
                 f"{res['cpus']} CPUs", fontsize=9)
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8, help="timed runs per tree and per floor")
    ap.add_argument("--reference", type=Path, default=None, help="another checkout, timed alternately")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/short_run.json")
    args = ap.parse_args()
    trees = {"current": ROOT, **({"reference": args.reference.resolve()} if args.reference else {})}
    with tempfile.TemporaryDirectory() as work:
        times = measure(trees, args.runs, Path(work))
    floors = {name: summary([timed([sys.executable, "-c", code], ROOT) for _ in range(args.runs)])
              for name, code in FLOORS.items()}
    res = {"command": " ".join(["sstq-fl", *RUN, "--out", "DIR"]), "runs": args.runs, "cpus": os.cpu_count(),
           "commits": {n: git_head(t) for n, t in trees.items()}, "target_s": TARGET_S,
           "trees": {n: summary(xs) for n, xs in times.items()}, "floors": floors,
           "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=1) + "\n")
    tmp.replace(args.out)
    plot(res, args.out.with_suffix(".png"))
    for n, r in {**res["trees"], **floors}.items():
        print(f"{n:24s} median {r['median_s']:.2f} s  [{r['min_s']:.2f}, {r['max_s']:.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
