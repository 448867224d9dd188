"""A campaign of bad inputs against the ``sstq-fl`` command line, each a subprocess in a fresh folder.

Each case is data: ``(surface, name, argv, files)`` (``files``: ``{relative path: text}`` created first;
``OUT`` in an argument names a folder the command must not create).  Each outcome is one of
``refused-cleanly`` (exit 2, one stderr line, no traceback, nothing written), ``traceback``,
``silent-accept`` (exit 0), ``wrote-files-on-refusal``, ``timeout`` or ``other``.  The per-case outcomes
and the counts go to a JSON file (written atomically); a summary table is printed.  A surface is one
function returning its cases: add a function and list it in :data:`SURFACES`.

    python benchmarks/bad_input_campaign.py --out results/bad_inputs.json [--repo /path/to/checkout] [--jobs 2]
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

Case = tuple[str, str, list[str], dict[str, str]]
BASE = 'task = "lsq"\nrounds = 1\nclients = 2\ndim = 4\nn = 20\nbatch = 4\n'
LSQ = ["--task", "lsq", "--dim", "4", "--n", "20", "--clients", "2", "--batch", "4", "--rounds", "1"]
SWEEP = ["sweep", "e.toml", "--out", "OUT", "--executor", "local"]


def experiment_cases() -> list[Case]:
    """Bad experiment files given to ``sweep``."""
    files = {
        "deep-array": "a = " + "[" * 50000 + "]" * 50000 + "\n", "deep-inline-table": "a = " + "{b=" * 3000 + "1" +
        "}" * 3000 + "\n", "deep-params": BASE + "[task_params]\nx = " + "[" * 40 + "]" * 40 + "\n",
        "alias-twice": BASE + "sampling-rate = 1.0\nsampling_rate = 0.5\n",
        "title-list": BASE + '[experiment]\ntitle = ["a"]\n',
        "title-int": BASE + "[experiment]\ntitle = 3\n",
        "description-table": BASE + "[experiment]\ndescription = {a=1}\n",
        "experiment-not-table": BASE + "experiment = 3\n", "params-not-table": BASE + "task_params = 3\n",
        "params-date": 'task = "lsq"\n[task_params]\nd = 1979-05-27\n',
        "params-on-builtin": BASE + "[task_params]\nrecords = 5\n",
        "over-budget": BASE + "budget-epsilon = 0.5\n", "empty-list": BASE + "seed = []\n", "seed-dup": BASE + "seed = [0, 0]\n",
        "encoder-dup": BASE + 'encoder = ["sstq-flat", "sstq-flat:b=4"]\n', "not-utf8": "\xff",
        "not-toml": "task = \n", "unknown-key": BASE + "epsilonn = 3\n", "unknown-encoder": BASE + 'encoder = "nope"\n',
        "bad-encoder-param": BASE + 'encoder = "sstq-flat:zz=1"\n', "grid-1e6": 'task = "lsq"\nseed = ' +
        str(list(range(1000))) + "\nepsilon = " + str(list(range(1, 1001))) + "\n",
        "lsq-data-huge": BASE.replace("n = 20", "n = 1000000000").replace("dim = 4", "dim = 1000000"),
    }
    bad_values = {"seed": ["-1", "[0, -7]", "2e3", "9223372036854775808", '"x"', "true"],
                  "dim": ["1e11", "100000000000", "0", "-4", '"4"'], "n": ["0", "100000000000"],
                  "rounds": ["0", "99999999999999999999", "1.5", "20000000"], "clients": ["0", "100000000000", "-1"],
                  "batch": ["0", "100000000000"], "epsilon": ["0", "-1", "inf", "nan", '"3"'],
                  "sampling-rate": ["0", "1.5", "nan"], "clip": ["0", "-1", "inf"], "lr": ["0", "nan"],
                  "partition": ['"nope"', "3"], "randomness": ['"nope"'], "delta": ["1", "-0.1"],
                  "budget-epsilon": ["-1", "inf", "0.5"], "encoder": ["3", '["a", 3]'], "task": ["3", '"nope"']}
    for key, values in bad_values.items():
        for v in values:
            text = "\n".join(line for line in BASE.splitlines() if not line.startswith(f"{key} ")) + f"\n{key} = {v}\n"
            files[f"{key}={v}"] = text
    return [("experiment", name, list(SWEEP), {"e.toml": text}) for name, text in files.items()]


def set_cases() -> list[Case]:
    """Bad ``sweep --set`` items."""
    items = [["rounds=99999999999999999999"], ["rounds=1\nclients=3"], ["rounds=1\rclients=3"], ["rounds=1", "rounds=2"],
             ["sampling-rate=1", "sampling_rate=0.5"], ["experiment={title='x'}"], ["experiment.title=x"],
             ["task_params={records=5}"], ["task_params=3"], ["nosuchkey=1"], ["=1"], ["rounds"], ["seed=-1"],
             ["seed=[0,-7]"], ["dim=100000000000"], ["dim=1e11"], ["epsilon=nan"], ["clients=0"], ["seed=[0,0]"],
             ["budget-epsilon=0.5"], ["rounds=[]"], ["encoder=nope"], ["a=" + "[" * 5000 + "]" * 5000],
             ["x=" + "{a=" * 3000 + "1" + "}" * 3000], ["rounds=1\x1b"], ["seed=" + str(list(range(20000)))]]
    out = []
    for i, group in enumerate(items):
        argv = [*SWEEP, *[a for item in group for a in ("--set", item)]]
        out.append(("set", f"set-{i}:{' '.join(group)[:40]!r}", argv, {"e.toml": BASE}))
    return out


def sweep_option_cases() -> list[Case]:
    """Bad sweep options and paths."""
    ok = {"e.toml": BASE}
    cases = [("sweep", "out-empty", ["sweep", "e.toml", "--out", ""], ok),
             ("sweep", "out-newline", ["sweep", "e.toml", "--out", "a\nb"], ok),
             ("sweep", "max-cells-0", [*SWEEP, "--max-cells", "0"], ok),
             ("sweep", "max-cells-neg", [*SWEEP, "--max-cells", "-5"], ok),
             ("sweep", "max-cells-word", [*SWEEP, "--max-cells", "many"], ok),
             ("sweep", "max-cells-too-small", [*SWEEP, "--set", "seed=[0,1,2]", "--max-cells", "2"], ok),
             ("sweep", "cpus-0", [*SWEEP, "--cpus-per-cell", "0"], ok),
             ("sweep", "cpus-nan", [*SWEEP, "--cpus-per-cell", "nan"], ok),
             ("sweep", "missing-file", ["sweep", "nope.toml", "--out", "OUT"], {}),
             ("sweep", "file-is-folder", ["sweep", "d", "--out", "OUT"], {"d/x": ""}),
             ("sweep", "resume-nothing", [*SWEEP, "--resume"], ok),
             ("sweep", "resume-and-force", [*SWEEP, "--resume", "--force"], ok),
             ("sweep", "executor-bad", ["sweep", "e.toml", "--out", "OUT", "--executor", "slurm"], ok)]
    return cases


def run_cases() -> list[Case]:
    """Bad ``run`` options and paths."""
    out: list[Case] = [("run", "out-empty", ["run", *LSQ, "--out", ""], {}),
                       ("run", "out-blank", ["run", *LSQ, "--out", "  "], {}),
                       ("run", "resume-nothing", ["run", *LSQ, "--out", "OUT", "--resume"], {}),
                       ("run", "config-missing", ["run", *LSQ, "--config", "nope.toml", "--out", "OUT"], {}),
                       ("run", "config-list", ["run", "--config", "e.toml", "--out", "OUT"],
                        {"e.toml": BASE + "seed = [0, 1]\n"}),
                       ("run", "config-deep", ["run", "--config", "e.toml", "--out", "OUT"],
                        {"e.toml": "a = " + "[" * 50000 + "]" * 50000 + "\n"}),
                       ("run", "config-alias-twice", ["run", "--config", "e.toml", "--out", "OUT"],
                        {"e.toml": BASE + "sampling-rate = 1.0\nsampling_rate = 0.5\n"}),
                       ("run", "config-seed-neg", ["run", "--config", "e.toml", "--out", "OUT"],
                        {"e.toml": BASE + "seed = -1\n"})]
    for flag, values in {"--seed": ["-1", "abc", "1.5"], "--rounds": ["0", "99999999999999999999", "abc"],
                         "--dim": ["0", "100000000000"], "--epsilon": ["0", "nan", "inf", "-1"],
                         "--budget-epsilon": ["0.5", "-1", "nan"], "--task-params": ['{"records": 5}', "[1]", "{"],
                         "--sampling-rate": ["0", "2"], "--clients": ["0", "1000000000"], "--delta": ["1", "-1"]}.items():
        for v in values:
            out.append(("run", f"{flag}={v}", ["run", *LSQ, flag, v, "--out", "OUT"], {}))
    return out


def compare_cases() -> list[Case]:
    """Bad ``compare`` encoder lists."""
    lists = ["sstq-flat:b=4 sstq-flat:b=4", "sstq-flat sstq-flat:b=4", "clean clean", "sqkr;sqkr", "nope",
             "sstq-flat:b=99999", "sstq-flat:zz=1", "", ";", "sstq-flat:b"]
    out = [("compare", f"encoders={s!r}", ["compare", *LSQ, "--encoders", s, "--out", "OUT"], {}) for s in lists]
    out.append(("compare", "out-empty", ["compare", *LSQ, "--out", ""], {}))
    return out


def numeric_cases() -> list[Case]:
    """Encoder specs and parameters, ε options, task code raising or exiting, non-finite data
    (:mod:`bad_input_cases_numeric`), and ε above each encoder's representable maximum."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bad_input_cases_numeric as numeric

    out: list[Case] = [("numeric", name, argv, files) for name, argv, files in numeric.cases()]
    for spec in ("sstq-flat:b=4", "sstq-ma:b=4", "sqkr", "vqsgd", "privunit", "privunit-mrc"):
        for eps in ("30.5", "709.8", "1e6"):
            out.append(("max-epsilon", f"{spec} eps={eps}", ["encoders", "check", spec, "--epsilon", eps,
                                                              *numeric.FAST], {}))
    return out


def more_cases() -> list[Case]:
    """gen, privacy replay, bench, plot, encoders, options, demo and run --resume cases (:mod:`bad_input_cases_more`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bad_input_cases_more

    return bad_input_cases_more.cases()


SURFACES: list[Callable[[], list[Case]]] = [experiment_cases, set_cases, sweep_option_cases, run_cases, compare_cases,
                                            numeric_cases, more_cases]
"""Every surface's cases (another surface: one more function here)."""


def cases() -> list[Case]:
    """Every case of every surface."""
    return [c for surface in SURFACES for c in surface()]


def run_case(case: Case, repo: Path, timeout: float) -> dict[str, object]:
    """Run one case in a fresh folder; its outcome (see the module's docstring)."""
    surface, name, argv, files = case
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff" else b"\xff")
        before = sorted(str(p) for p in root.rglob("*"))
        env = {**os.environ, "PYTHONPATH": str(repo)}
        cmd = [sys.executable, "-m", "sstq_fl.cli", *[a.replace("OUT", str(root / "out")) if a == "OUT" else a
                                                       for a in argv]]
        try:
            p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"surface": surface, "name": name, "outcome": "timeout"}
        after = sorted(str(p) for p in root.rglob("*"))
        return {"surface": surface, "name": name, "outcome": classify(p.returncode, p.stderr, before != after),
                "rc": p.returncode, "stderr": p.stderr.strip()[-300:]}


def classify(rc: int, err: str, wrote: bool) -> str:
    """The outcome of one case from its exit status, stderr and whether the folder changed."""
    if "Traceback" in err:
        return "traceback"
    if rc == 0:
        return "silent-accept"
    if wrote:
        return "wrote-files-on-refusal"
    if rc == 2 and len(err.strip().splitlines()) == 1:
        return "refused-cleanly"
    return "other"


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; exit 0 when every case was refused cleanly, else 1."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bad_input_campaign.json", help="result JSON")
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]), help="the checkout to test")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    ap.add_argument("--only", default="", help="run only the cases whose surface or name contains this")
    args = ap.parse_args(argv)
    todo = [c for c in cases() if args.only in c[0] or args.only in c[1]]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda c: run_case(c, Path(args.repo), args.timeout), todo))
    counts = collections.Counter(str(r["outcome"]) for r in rows)
    sys.path.insert(0, args.repo)
    from sstq_fl.io import atomic_write_json

    atomic_write_json(args.out, {"repo": args.repo, "cases": len(rows), "counts": dict(counts), "rows": rows})
    for r in rows:
        if r["outcome"] != "refused-cleanly":
            print(f"{r['outcome']:24s} {r['surface']:10s} {r['name']}: {str(r.get('stderr', ''))[-120:]!r}")
    by_surface = collections.Counter((str(r["surface"]), str(r["outcome"])) for r in rows)
    print(f"{'surface':12s} {'outcome':24s} count")
    for (s, o), n in sorted(by_surface.items()):
        print(f"{s:12s} {o:24s} {n}")
    print(f"total {len(rows)}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0 if counts["refused-cleanly"] == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
