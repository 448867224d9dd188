"""The FL task registry: built-ins by name, a one-line error for an unknown one, plug-ins by entry point."""

from importlib import metadata

import pytest
import torch

from sstq_fl.fl import tasks


def test_unknown_task_is_a_one_line_error_listing_the_names():
    with pytest.raises(ValueError, match=r"unknown FL task 'nope'; registered: cifar10, fmnist, lsq") as e:
        tasks.make_task("nope")
    assert "\n" not in str(e.value)


def test_a_task_plugin_is_built_by_make_task(monkeypatch):
    class EntryPoint:
        name, value, dist = "tiny-lsq", "tiny_pkg:make", None

        def load(self):
            return lambda seed, **kw: tasks.LeastSquaresTask(4, 20, seed)

    state = tasks.TASKS.snapshot()
    tasks.TASKS.reload_plugins()
    monkeypatch.setattr(metadata, "entry_points", lambda group=None, **kw: [EntryPoint()] if group == "sstq_fl.tasks" else [])
    try:
        task = tasks.make_task("tiny-lsq", 3, dim=100, n=4000)
        assert task.dim == 4 and torch.equal(task.data.y_train, tasks.LeastSquaresTask(4, 20, 3).data.y_train)
    finally:
        tasks.TASKS.restore(state)
    assert "tiny-lsq" not in tasks.TASKS
