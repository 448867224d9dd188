"""Bad inputs to the encoder, task-code and numeric surfaces of ``sstq-fl``: each must be refused in one line, exit 2.

:func:`cases` lists ``(name, argv after the program name, files to create in a fresh temporary folder)``; the
campaign runs each and calls it clean when the exit status is 2, stderr's last line is the one error line, no
traceback appears and nothing is written under the temporary folder's ``out``.
"""

from __future__ import annotations

Case = tuple[str, list[str], dict[str, str]]
ENCODERS = ["clean", "privunit", "privunit-mrc", "sqkr", "sstq-flat", "sstq-ma", "vqsgd"]
FRAMED = ["sqkr", "sstq-flat", "sstq-ma"]
FAST = ["--trials", "100", "--audit-trials", "100", "--checks", "bits"]
BAD_FRAME = {"iters": ["0", "-1", "1.5", "x"], "passes": ["0", "-3"], "rho": ["1", "0.5", "nan", "inf", "-2"],
             "level": ["1", "0", "nan", "inf"], "eta": ["0", "1", "nan"], "delta": ["0", "1.5", "nan"],
             "frame": ["nope", ""], "kashin": ["x"], "guarantee": ["maybe"], "warmup": ["x"]}
BAD_OWN = {"sstq-flat": {"b": ["0", "17", "x", "2.5"], "codebook": ["x"]}, "sstq-ma": {"b": ["0", "17"], "law": ["x"],
           "scale": ["x"], "decode": ["x"]}, "sqkr": {"k": ["-1", "17"], "b0": ["0", "17"], "coin": ["x"]},
           "privunit": {"cap": ["x"]}, "privunit-mrc": {"bits": ["0", "25", "x"], "seed_bits": ["-1", "33"], "coin": ["x"]}}
BAD_EPS = ["nan", "inf", "-1", "0", "1e-320"]
HEAD = "import sys, torch, sstq_fl\n"
TASK = ("def make_task():\n    x = torch.randn(40, 4); y = torch.randint(0, 2, (40,))\n{pre}"
        "    return sstq_fl.Task(model={model}, train=(x, y), test=(x, y){extra})\n")
LIN = "lambda: torch.nn.Linear(4, 2)"
RAISES = {"zde": "1/0", "key": "{}['k']", "runtime": "(_ for _ in ()).throw(RuntimeError('boom'))",
          "exit0": "sys.exit(0)", "exit1": "sys.exit(1)", "attr": "None.x", "assert": "(_ for _ in ()).throw(AssertionError())"}


def check(spec: str, *extra: str) -> list[str]:
    return ["encoders", "check", spec, *FAST, *extra]


def spec_cases() -> list[Case]:
    out: list[Case] = []
    for enc in ENCODERS:
        out += [(f"spec-empty-items-{enc}", check(f"{enc}:a=1,,"), {}), (f"spec-trailing-colon-{enc}", check(f"{enc}:"), {}),
                (f"spec-unknown-param-{enc}", check(f"{enc}:zz=1"), {}), (f"spec-empty-value-{enc}", check(f"{enc}:zz="), {})]
        out += [(f"eps-{e}-{enc}", check(enc, "--epsilon", e), {}) for e in BAD_EPS if enc != "clean"]
    for enc in FRAMED:
        out += [(f"param-{enc}-{k}={v}", check(f"{enc}:{k}={v}"), {}) for k, vs in BAD_FRAME.items() for v in vs]
        out.append((f"dup-{enc}", check(f"{enc}:iters=3,iters=4"), {}))
    for enc, params in BAD_OWN.items():
        out += [(f"param-{enc}-{k}={v}", check(f"{enc}:{k}={v}"), {}) for k, vs in params.items() for v in vs]
    out += [("spec-no-name", check(":b=4"), {}), ("spec-empty", check(""), {}), ("spec-blank", check("  "), {})]
    return out


def run_args(*extra: str, task: str = "lsq") -> list[str]:
    return ["run", "--task", task, "--clients", "4", "--rounds", "2", "--out", "out", *extra]


def eps_run_cases() -> list[Case]:
    out: list[Case] = []
    for enc in ["sstq-flat", "sqkr", "vqsgd", "privunit"]:
        out += [(f"run-eps-{e}-{enc}", run_args("--encoder", enc, "--epsilon", e), {}) for e in [*BAD_EPS, "1e6"]
                if not (e == "1e6" and enc != "privunit")]
    out += [(f"compare-eps-{e}", ["compare", "--task", "lsq", "--clients", "4", "--rounds", "2", "--epsilon", e,
                                  "--encoders", "sstq-flat", "--out", "out"], {}) for e in BAD_EPS]
    out += [("run-spec-iters0", run_args("--encoder", "sstq-flat:iters=0"), {}),
            ("run-spec-empty-items", run_args("--encoder", "sstq-flat:b=4,,"), {})]
    return out


def plan_cases() -> list[Case]:
    base = ["privacy", "plan", "--rounds", "10"]
    out: list[Case] = [(f"plan-eps-{e}", [*base, "--ldp-epsilon", e], {}) for e in [*BAD_EPS, "1e-13", "5e-324"]]
    bad = {"--rounds": ["0", "-1", "1.5", "nan"], "--delta": ["0", "1", "nan", "inf", "-1e-5"],
           "--sampling-rate": ["0", "1.5", "nan", "-0.1"], "--shuffle": ["0", "-1", "nan"]}
    out += [(f"plan{k}={v}", ["privacy", "plan", "--ldp-epsilon", "1", *(["--rounds", "10"] if k != "--rounds" else []),
                              k, v], {}) for k, vs in bad.items() for v in vs]
    return out


def task_file(code: str) -> dict[str, str]:
    return {"t.py": HEAD + code}


def task_cases() -> list[Case]:
    argv = run_args("--encoder", "sstq-flat", task="t.py:make_task")
    out: list[Case] = []
    for kind, expr in RAISES.items():
        out += [(f"task-factory-{kind}", argv, task_file(f"def make_task():\n    return {expr}\n")),
                (f"task-module-{kind}", argv, task_file(f"{expr}\ndef make_task():\n    pass\n")),
                (f"task-model-{kind}", argv, task_file(TASK.format(pre="", model=f"lambda: {expr}", extra=""))),
                (f"task-metric-{kind}", argv, task_file(TASK.format(pre="", model=LIN, extra=f", metric=lambda o, y: {expr}"))),
                (f"task-loss-{kind}", argv, task_file(TASK.format(pre="", model=LIN, extra=f", loss=lambda o, y: {expr}")))]
    for v in ("nan", "inf"):
        out += [(f"task-data-{v}", argv, task_file(TASK.format(pre=f"    x[3, 1] = float('{v}')\n", model=LIN, extra=""))),
                (f"task-test-label-{v}", argv, task_file(TASK.format(
                    pre=f"    y = torch.randn(40); y[2] = float('{v}')\n", model="lambda: torch.nn.Linear(4, 1)", extra=""))),
                (f"task-loss-{v}", argv, task_file(TASK.format(pre="", model=LIN,
                                                               extra=f", loss=lambda o, y: o.sum() * float('{v}')"))),
                (f"task-metric-{v}", argv, task_file(TASK.format(pre="", model=LIN,
                                                                 extra=f", metric=lambda o, y: float('{v}')")))]
    deep = "[" * 30000 + "]" * 30000  # within the kernel's 128 KiB per argument
    out += [("task-params-deep-json", [*argv, "--task-params", '{"a": ' + deep + "}"], task_file(TASK.format(
        pre="", model=LIN, extra="").replace("def make_task():", "def make_task(**kw):")))]
    return out


def cases() -> list[Case]:
    """Every case of this module (at least 150)."""
    return spec_cases() + eps_run_cases() + plan_cases() + task_cases()
