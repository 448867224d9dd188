"""Bad command lines by category, for the campaign (:mod:`tests.test_cli_campaign`) and the property-based fuzz
(:mod:`tests.test_cli_fuzz`): numbers (nan, inf, negative, huge, garbage), specs (malformed, unknown parameters,
huge values) and paths (missing, a file, a folder of another kind).  ``OUT`` in an argument is replaced by a fresh
output path, which a refused command must not create."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

LSQ = ["--task", "lsq", "--dim", "8", "--n", "100", "--clients", "5", "--batch", "10", "--clip", "1", "--rounds", "1"]
GARBAGE = ["nan", "inf", "-inf", "-1", "1e999", "abc", "", "0x1g", "--"]
"""Values no number option accepts (``1e999`` parses as inf)."""

# option → (command prefix, values that option must refuse besides GARBAGE)
NUMBER_OPTIONS: dict[str, tuple[list[str], list[str]]] = {
    "--lr": (["run", *LSQ], ["0", "-0.5", "1,5"]),
    "--clip": (["run", *LSQ], ["0", "-1e-9"]),
    "--epsilon": (["run", *LSQ], ["0", "-3"]),
    "--server-cap": (["run", *LSQ], ["0"]),
    "--sampling-rate": (["run", *LSQ], ["0", "1.5"]),
    "--alpha": (["run", *LSQ], ["0"]),
    "--budget-epsilon": (["run", *LSQ], ["1", "-2"]),
    "--lsq-noise": (["run", *LSQ], ["-0.1"]),
    "--rounds": (["run", *LSQ], ["0", "1.5", "1,5", "100000000"]),
    "--clients": (["run", *LSQ], ["0", "1.5", "1000000000"]),
    "--batch": (["run", *LSQ], ["0", "2.5"]),
    "--dim": (["run", *LSQ], ["0", "100000000000"]),
    "--n": (["run", *LSQ], ["0", "1000000000000"]),
    "--delta": (["run", *LSQ], ["1", "2"]),
    "--clients-per-node": (["run", *LSQ], ["0", "6"]),
    "--client-cpus": (["run", *LSQ, "--engine", "flower"], []),
    "--ldp-epsilon": (["privacy", "plan", "--rounds", "10"], ["0", "1e308"]),
    "--sampling-rate ": (["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "10"], ["0", "2"]),
    "--delta ": (["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "10"], ["0", "1"]),
    "--rounds ": (["privacy", "plan", "--ldp-epsilon", "1"], ["0", "100000000"]),
    "--shuffle": (["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "10"], ["0", "1.5"]),
    "--sizes": (["bench", "fwht", "--rows", "2"], ["0", "3", "1099511627776"]),
    "--rows": (["bench", "fwht", "--sizes", "8"], ["0"]),
    "--dim  ": (["bench", "encode-speed", "--clients", "2", "--encoders", "clean"], ["0", "100000000000"]),
    "--epsilon ": (["bench", "encode-speed", "--clients", "2", "--dim", "8", "--encoders", "clean"], ["0"]),
    "--trials": (["bench", "mse-vs-dim", "--dims", "8", "--encoders", "clean"], ["0"]),
    "--dims": (["bench", "mse-vs-dim", "--trials", "2", "--encoders", "clean"], ["0", "100000000000"]),
    "--rho": (["bench", "kashin", "--dim", "8"], ["1", "0.5"]),
    "--records": (["gen", "dp-mepf", "--epsilon", "1"], ["-1"]),
    "--clients  ": (["gen", "dp-mepf", "--epsilon", "1"], ["0"]),
}
"""Keys with trailing spaces name the same flag on another command (the table's keys must differ)."""

BAD_SPECS = ["", ":", "nope", "sstq-flat:b", "sstq-flat:=4", "sstq-flat:b=4,b=4", "sstq-flat:zz=1", "sstq-flat:b=99",
             "sstq-flat:b=0", "sstq-flat:b=abc", "sstq-flat:rho=1e9", "sstq-flat:rho=inf", "sstq-flat:rho=nan",
             "sstq-flat:rho=1", "sstq-flat:frame=nope", "sstq-flat:kashin=nope", "sqkr:coin=public",
             "privunit-mrc:coin=public", "sqkr:coin=nope", "privunit:zz=1", "vqsgd:zz=1", "clean:zz=1",
             "sstq-ma:b=99", "sstq-flat:b=4,codebook=nope"]
"""Encoder specs that ``run --encoder`` must refuse."""

DEVICES = ["cuda:abc", "gpu", "cuda:-1", "cpu:0", "", "cuda:99"]
"""Devices no command accepts on a machine without 99 CUDA devices."""

PATH_CASES = [
    ["run", *LSQ, "--data-dir", "MISSING", "--task", "fmnist", "--out", "OUT"],
    ["run", *LSQ, "--resume", "--out", "OUT"],
    ["run", *LSQ, "--config", "MISSING", "--out", "OUT"],
    ["run", *LSQ, "--out", "FILE"],
    ["run", *LSQ, "--out", "COMPARISON"],
    ["run", *LSQ, "--force", "--out", "COMPARISON"],
    ["run", *LSQ, "--resume", "--out", "COMPARISON"],
    ["run", *LSQ, "--out", "SWEEP"],
    ["compare", *LSQ, "--encoders", "clean", "--out", "RUN"],
    ["compare", *LSQ, "--encoders", "clean", "--force", "--out", "RUN"],
    ["compare", *LSQ, "--encoders", "clean", "--out", "SWEEP"],
    ["compare", *LSQ, "--encoders", "clean", "--resume", "--out", "OUT"],
    ["compare", *LSQ, "--encoders", "clean", "--out", "FILE"],
    ["sweep", "MISSING", "--executor", "local", "--out", "OUT"],
    ["sweep", "EXPERIMENT", "--executor", "local", "--out", "RUN"],
    ["sweep", "EXPERIMENT", "--executor", "local", "--out", "COMPARISON"],
    ["sweep", "EXPERIMENT", "--executor", "local", "--resume", "--out", "OUT"],
    ["privacy", "replay", "MISSING"],
    ["privacy", "replay", "FILE"],
    ["plot", "MISSING"],
    ["gen", "dp-mepf", "--epsilon", "1", "--out", "RUN_GEN"],
    ["gen", "dp-mepf", "--epsilon", "1", "--out", "FILE"],
]
"""Missing files, an ``--out`` that is a file, folders of another kind (filled in by :class:`Folders`)."""


def number_cases() -> list[list[str]]:
    """Every number option with every value it must refuse."""
    out = []
    for flag, (prefix, extra) in NUMBER_OPTIONS.items():
        for value in [*GARBAGE, *extra]:
            out.append([*prefix, flag.strip(), value, *_out_for(prefix)])
    return out


def _out_for(prefix: list[str]) -> list[str]:
    """``--out OUT`` where the command writes (bench: a file; plan: nothing)."""
    if prefix[0] == "privacy":
        return []
    return ["--out", "OUT.json" if prefix[0] == "bench" else "OUT"]


def spec_cases() -> list[list[str]]:
    """Bad encoder specs on ``run`` and ``compare``, bad devices on the commands that take one, empty lists."""
    out = [["run", *LSQ, "--encoder", s, "--out", "OUT"] for s in BAD_SPECS]
    out += [["compare", *LSQ, "--encoders", f"clean;{s}" if s else ";;", "--out", "OUT"] for s in BAD_SPECS[:8]]
    for cmd in (["bench", "encode-speed", "--dim", "8", "--clients", "2"], ["bench", "fwht", "--sizes", "8"]):
        out += [[*cmd, "--device", d, "--out", "OUT.json"] for d in DEVICES]
    out += [["gen", "dp-mepf", "--epsilon", "1", "--device", d, "--out", "OUT"] for d in ["cuda:abc", "gpu", "cpu:0"]]
    out += [["compare", *LSQ, "--encoders", v, "--out", "OUT"] for v in ["", ";;", " "]]
    out += [["bench", "mse-vs-dim", "--encoders", v, "--out", "OUT.json"] for v in ["", ";"]]
    out += [["run", *LSQ, "--task-params", v, "--out", "OUT"] for v in ["[1]", "{", "nope"]]
    out += [["run", *LSQ, "--engine", "flower", "--ray-address", a, "--out", "OUT"] for a in ["nowhere", "1.2.3.4:x"]]
    return out


def all_cases() -> list[list[str]]:
    """The campaign: every number, spec and path case."""
    return number_cases() + spec_cases() + PATH_CASES


@dataclass
class Folders:
    """The fixed folders and files the path cases name: a run, a comparison, a sweep, a file, an experiment."""

    root: Path

    def make(self) -> Folders:
        """Write them (the results folders as their commands leave them, without training)."""
        for name, marks in (("RUN", ["metrics.json", "transcript.jsonl"]), ("COMPARISON", ["comparison.json"]),
                            ("SWEEP", ["sweep.json"]), ("RUN_GEN", ["metrics.json", "transcript.jsonl"])):
            (self.root / name).mkdir(parents=True, exist_ok=True)
            for m in marks:
                (self.root / name / m).write_text("{}")
        (self.root / "COMPARISON" / "clean").mkdir(exist_ok=True)
        (self.root / "FILE").write_text("not a folder")
        (self.root / "EXPERIMENT").write_text('task = "lsq"\ndim = 8\nn = 100\nclients = 5\nbatch = 10\nrounds = 1\n'
                                              'encoder = ["clean"]\n')
        return self

    def argv(self, case: list[str], out: Path) -> list[str]:
        """``case`` with its upper-case folder names (``MISSING``, ``OUT``, ``RUN``, ...) made paths under the
        root (``OUT``: ``out``, which must not exist afterwards)."""
        names = {"MISSING": str(self.root / "missing"), "OUT": str(out), "OUT.json": str(out) + ".json"}
        return [names.get(a, str(self.root / a) if a.isupper() and (self.root / a).exists() else a) for a in case]


def outcome(argv: list[str]) -> tuple[int, str]:
    """``(exit code, stderr)`` of ``sstq-fl argv`` run in this process (stdout discarded)."""
    from sstq_fl.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # noqa: BLE001 (a traceback: the campaign counts it)
            import traceback

            traceback.print_exception(exc, file=err)
            rc = -1
    return rc, err.getvalue()


def verdict(rc: int, err: str, out: Path) -> str:
    """``ok`` (one ``sstq-fl`` error line, exit 2, nothing at ``out``), ``traceback``, ``silent`` (exit 0), ``written``
    (``out`` created) or ``noisy`` (another exit code, or not exactly one error line)."""
    lines = err.strip().splitlines()
    if "Traceback" in err or rc == -1:
        return "traceback"
    if rc == 0:
        return "silent"
    if out.exists() or Path(str(out) + ".json").exists():
        return "written"
    if rc != 2 or len(lines) != 1 or not lines[0].startswith("sstq-fl"):
        return "noisy"
    return "ok"
