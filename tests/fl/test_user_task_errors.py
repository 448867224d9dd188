"""User task code that raises, exits or yields non-finite numbers: one line naming it, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from sstq_fl.cli import main

HEAD = "import sys, torch, sstq_fl\n"
TASK = ("def make_task():\n    x = torch.randn(40, 4); y = torch.randint(0, 2, (40,))\n{pre}"
        "    return sstq_fl.Task(model={model}, train=(x, y), test=(x, y){extra})\n")
LIN = "lambda: torch.nn.Linear(4, 2)"
CASES = {
    "factory_zde": ("def make_task():\n    return 1/0\n", "factory make_task raised ZeroDivisionError: division by zero"),
    "factory_key": ("def make_task():\n    return {}['k']\n", "factory make_task raised KeyError"),
    "factory_rt": ("def make_task():\n    raise RuntimeError('boom')\n", "factory make_task raised RuntimeError: boom"),
    "factory_exit": ("def make_task():\n    sys.exit(0)\n", "factory make_task raised SystemExit"),
    "module_exit": ("sys.exit(0)\ndef make_task():\n    pass\n", "SystemExit"),
    "model_rt": (TASK.format(pre="", model="lambda: 1/0", extra=""), "model constructor raised ZeroDivisionError"),
    "metric_key": (TASK.format(pre="", model=LIN, extra=", metric=lambda o, y: {}['k']"), "metric raised KeyError"),
    "metric_exit": (TASK.format(pre="", model=LIN, extra=", metric=lambda o, y: sys.exit(3)"), "metric raised SystemExit"),
    "loss_rt": (TASK.format(pre="", model=LIN, extra=", loss=lambda o, y: 1/0"), "loss raised ZeroDivisionError"),
    "loss_nan": (TASK.format(pre="", model=LIN, extra=", loss=lambda o, y: o.sum() * float('nan')"), "loss"),
    "metric_inf": (TASK.format(pre="", model=LIN, extra=", metric=lambda o, y: float('inf')"), "test_metric is inf"),
    "data_nan": (TASK.format(pre="    x[5, 2] = float('nan')\n", model=LIN, extra=""), "train x has NaN"),
    "label_inf": (TASK.format(pre="    y = torch.randn(40); y[0] = float('inf')\n", model="lambda: torch.nn.Linear(4, 1)",
                              extra=""), "train y has NaN"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_code_failure_is_one_line_exit_2_nothing_written(case: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, want = CASES[case]
    (tmp_path / "t.py").write_text(HEAD + code)
    out = tmp_path / "out"
    rc = main(["run", "--task", f"{tmp_path / 't.py'}:make_task", "--clients", "4", "--rounds", "2",
               "--encoder", "sstq-flat", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and want in err, err
    assert not out.exists()


def test_metric_turning_nan_in_training_stops_before_next_charge(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pre = ("    calls = []\n    def metric(o, y):\n        calls.append(1)\n"
           "        return float('nan') if len(calls) > 3 else 0.5\n")
    (tmp_path / "t.py").write_text(HEAD + TASK.format(pre=pre, model=LIN, extra=", metric=metric"))
    rc = main(["run", "--task", f"{tmp_path / 't.py'}:make_task", "--clients", "4", "--rounds", "5",
               "--encoder", "sstq-flat", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()[-1]  # INFO log lines come first
    assert rc == 2 and err.startswith("sstq-fl: error:") and "test_metric is nan" in err and "charged" in err, err


def test_deeply_nested_task_params_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = "[" * 30000 + "]" * 30000
    rc = main(["run", "--task", "lsq", "--task-params", '{"a": ' + deep + "}", "--clients", "4", "--rounds", "2",
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and "recursion limit" in err and not (tmp_path / "out").exists(), err
