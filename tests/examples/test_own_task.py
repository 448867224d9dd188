"""``examples/own-task``: a user's CNN on a Fashion-MNIST subset, at most ``MAX_LINES`` lines of user code,
trained by the vectorized engine, by the Flower engine (one client per simulated node, the task named by
its file) and by cohort nodes (two virtual clients per node, the task named ``MODULE:NAME`` and found on
the driver's ``sys.path``, which the Ray workers must see too).  In reproducible mode each Flower run's
per-round metrics are the vectorized engine's, as for the built-in tasks (tests/flower/test_engine.py)."""

import math
import os
from pathlib import Path

import pytest

from sstq_fl.fl.engine import RunConfig, run
from tests.examples.test_quickstart import needs_data
from tests.fl.test_engine import same_rounds

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own-task"
MAX_LINES = 40
SMALL = dict(task_params='{"records": 200, "test_records": 200}', clients=4, rounds=2, batch=16, clip=1.0, lr=0.5,
             encoder="sstq-flat:b=4", epsilon=8.0)


def test_the_user_code_is_at_most_40_lines_and_the_readme_has_both_commands():
    assert len((EXAMPLE / "cnn_task.py").read_text().splitlines()) <= MAX_LINES
    readme = (EXAMPLE / "README.md").read_text()
    assert readme.count("sstq-fl run --task examples/own-task/cnn_task.py:cnn_task") >= 2 and "--engine flower" in readme


def accuracies(m: dict) -> list[float]:
    """The per-round test accuracies, each checked finite and in [0, 1]."""
    acc = [r["test_accuracy"] for r in m["rounds"]] + [m["final"]["test_accuracy"]]
    assert all(math.isfinite(a) and 0 <= a <= 1 for a in acc), acc
    return acc


@needs_data
def test_the_example_runs_on_the_vectorized_engine(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the README's relative task path
    m = run(RunConfig(task="examples/own-task/cnn_task.py:cnn_task", **SMALL), tmp_path / "v", progress=False)
    accuracies(m)
    assert m["config"]["task"] == f"{EXAMPLE / 'cnn_task.py'}:cnn_task" and m["final"]["bits_per_client"] > 0
    assert m["non_private_diagnostics"]["fields"] == ["train_loss"]


@needs_data
def test_the_example_on_flower_nodes_and_on_cohort_nodes_gives_the_vectorized_rounds(tmp_path, monkeypatch):
    pytest.importorskip("flwr")
    from sstq_fl.flower.apps.sstq_server import run_flower

    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # Flower extends it with sys.path
    by_file = RunConfig(task=f"{EXAMPLE / 'cnn_task.py'}:cnn_task", **SMALL)
    ref = run(by_file, tmp_path / "v", progress=False)
    flw = run(RunConfig(**{**vars(by_file), "engine": "flower"}), tmp_path / "f", progress=False)
    assert same_rounds(flw["rounds"], ref["rounds"], rel=1e-6)

    monkeypatch.syspath_prepend(str(EXAMPLE))  # `cnn_task` importable in this process, not from the cwd
    by_module = RunConfig(task="cnn_task:cnn_task", engine="flower", clients_per_node=2, **SMALL)
    coh = run_flower(by_module, tmp_path / "c")
    assert same_rounds(coh["rounds"], ref["rounds"], rel=1e-6)
    assert all(r["clients"] == 4 and r["dropped"] == [] for r in flw["rounds"] + coh["rounds"])
    accuracies(coh)
