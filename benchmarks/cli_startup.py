#!/usr/bin/env python3
"""Start-up time of the command line: the wall time of ``sstq-fl --help`` and ``sstq-fl encoders``.

Each timed run is a fresh process running what the ``sstq-fl`` console script runs
(``from sstq_fl.cli import console_main; console_main()``) with a tree's ``sstq_fl`` first on the path.  With
``--reference TREE`` (another checkout, e.g. ``git archive 7258d40 sstq_fl | tar -x -C /tmp/base``) the runs
alternate between the two trees, so both see the same machine load; the JSON gives every run's seconds, each
tree's median, the heavy packages each tree's command imported (``sys.modules`` at exit) and the machine's load
average before and after (the numbers mean little without it on a shared machine).

    .venv/bin/python benchmarks/cli_startup.py --runs 5 --reference /tmp/base --out benchmarks/results/cli_startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"--help": 1.0, "encoders": 2.0}
"""The timed commands and their target wall seconds."""
HEAVY = ("torch", "flwr", "matplotlib", "ray", "scipy")
MAIN = "from sstq_fl.cli import console_main; console_main()"
PROBE = ("import atexit, sys\n"
         f"atexit.register(lambda: print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})), "
         "file=sys.stderr))\n" + MAIN.replace("; ", "\n"))


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def timed(args: list[str], tree: Path) -> float:
    """Seconds from start to end of one ``sstq-fl ARGS`` process with ``tree`` first on the path."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", MAIN, *args], cwd=tree, env=_env(tree), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def heavy_imports(args: list[str], tree: Path) -> list[str]:
    """The packages of :data:`HEAVY` that ``sstq-fl ARGS`` had imported when it exited."""
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=tree, env=_env(tree), check=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return list(json.loads(out.stderr.strip().splitlines()[-1].replace("'", '"')))


def import_time(tree: Path, top: int = 5) -> dict[str, Any]:
    """``python -X importtime -c 'import sstq_fl.cli'`` in ``tree``: the module's cumulative import seconds and the
    ``top`` modules it imports directly, or their own direct imports, that cost most (cumulative seconds)."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", "import sstq_fl.cli"], cwd=tree, env=_env(tree),
                         check=True, capture_output=True, text=True).stderr
    rows = [(r[2].rstrip(), int(r[1]) / 1e6) for r in (line.split("|") for line in err.splitlines()[1:])]
    depth = [(len(n) - len(n.lstrip()) - 1) // 2 for n, _ in rows]  # 0: imported by the -c statement
    end = next(i for i, (n, _) in enumerate(rows) if n == " sstq_fl.cli")
    start = max((i + 1 for i in range(end) if depth[i] == 0), default=0)  # its sub-tree is printed just before it
    outer = sorted(((n.strip(), s) for (n, s), k in zip(rows[start:end], depth[start:end]) if k in (1, 2)),
                   key=lambda t: -t[1])
    return {"sstq_fl.cli_s": round(rows[end][1], 4),
            "largest": {n: round(s, 4) for n, s in outer[:top]}}


def measure(trees: dict[str, Path], runs: int) -> dict[str, dict[str, list[float]]]:
    """``runs`` timed processes per command and tree, alternating trees run by run, after one untimed run
    each (bytecode written, files cached)."""
    times: dict[str, dict[str, list[float]]] = {c: {n: [] for n in trees} for c in COMMANDS}
    for cmd in COMMANDS:
        for i in range(runs + 1):
            for name, tree in trees.items():
                s = timed(cmd.split(), tree)
                if i:
                    times[cmd][name].append(s)
                print(f"sstq-fl {cmd} [{name}] run {i}/{runs}: {s:.2f} s{' (untimed)' if not i else ''}",
                      file=sys.stderr)
    return times


def git_head(tree: Path) -> str:
    """``tree``'s commit (``+changes`` where its tracked files differ from it); ``unknown`` outside git."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    if head.returncode:
        return "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=tree, capture_output=True,
                           text=True).stdout.strip()
    return head.stdout.strip() + ("+changes" if dirty else "")


def summary(xs: list[float]) -> dict[str, Any]:
    return {"seconds": [round(x, 4) for x in xs], "median_s": round(statistics.median(xs), 4),
            "min_s": round(min(xs), 4), "max_s": round(max(xs), 4)}


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per command and tree")
    ap.add_argument("--reference", type=Path, default=None,
                    help="another tree holding sstq_fl/ (the commit before), timed alternately")
    ap.add_argument("--reference-commit", default=None, help="the commit --reference holds (recorded)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cli_startup.json")
    args = ap.parse_args()
    trees = {"current": ROOT, **({"reference": args.reference.resolve()} if args.reference else {})}
    load_before = os.getloadavg()
    times = measure(trees, args.runs)
    res = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": machine(),
        "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()},
        "commits": {"current": git_head(ROOT), **({"reference": args.reference_commit or git_head(trees["reference"])}
                                                  if args.reference else {})},
        "runs": args.runs,
        "commands": {f"sstq-fl {c}": {"target_s": target, **{n: summary(times[c][n]) for n in trees},
                                      "heavy_imports": {n: heavy_imports(c.split(), t) for n, t in trees.items()}}
                     for c, target in COMMANDS.items()},
        "import_time": {n: import_time(t) for n, t in trees.items()},
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    for c, r in res["commands"].items():
        line = "  ".join(f"{n} median {r[n]['median_s']:.2f} s (imports {', '.join(r['heavy_imports'][n]) or 'none'})"
                         for n in trees)
        print(f"{c:20s} {line}  target {r['target_s']} s")
    for n, r in res["import_time"].items():
        print(f"import sstq_fl.cli [{n}]: {r['sstq_fl.cli_s'] * 1e3:.0f} ms; largest: "
              + ", ".join(f"{m} {v * 1e3:.0f} ms" for m, v in r["largest"].items()))
    print(f"load average (1, 5, 15 min) before {load_before}, after {res['load_average_1_5_15']['after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
