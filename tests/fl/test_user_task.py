"""A user's own task (``sstq_fl.Task``): its checks, the model adapter's gradients and initialisation,
and the task strings ``PKG.MODULE:NAME`` / ``path/to/file.py:NAME`` with their one-line errors."""

import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

import sstq_fl
from sstq_fl.config.train import RunConfig
from sstq_fl.fl import tasks
from sstq_fl.fl.module_task import ModuleTask


def toy(n: int = 40, classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 5, generator=g), torch.randint(0, classes, (n,), generator=g)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def bn_model() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value), str(exc.value)
    return str(exc.value)


def test_sstq_fl_exports_task_lazily_without_importing_torch():
    code = "import sys, sstq_fl; assert 'torch' not in sys.modules; t = sstq_fl.Task; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert sstq_fl.Task.__module__ == "sstq_fl.fl.user_task"


@pytest.mark.parametrize("kw, match", [
    (dict(train=(torch.zeros(4, 5), torch.zeros(3, dtype=torch.long))), "train: x has 4 records but y has 3"),
    (dict(model=mlp()), "model must be a zero-argument callable"),
    (dict(train="data"), "train must be .* or a torch Dataset, got str"),
    (dict(test=(torch.zeros(4, 6), torch.zeros(4, dtype=torch.long))), r"train x records are \[5\] but test x records are \[6\]"),
    (dict(natural_ids=[0, 1]), r"natural_ids must hold one client id per training record \(40\)"),
])
def test_task_refuses_bad_inputs_in_one_line(kw, match):
    base = dict(model=mlp, train=toy(), test=toy(20, seed=1))
    with pytest.raises(ValueError, match=match) as e:
        sstq_fl.Task(**{**base, **kw})
    one_line(e)


@pytest.mark.parametrize("model, match", [
    (lambda: nn.Sequential(nn.Linear(5, 8), nn.Linear(8, 2)), r"labels up to 2 need logits \[2, >= 3\]"),
    (lambda: nn.Flatten(), "has no parameters"),
    (lambda: nn.Linear(7, 3), "model fails on training records of shape \\[5\\] \\(RuntimeError"),
    (lambda: "not a module", "must return a torch.nn.Module, got str"),
])
def test_the_adapter_refuses_a_model_that_does_not_fit_in_one_line(model, match):
    with pytest.raises(ValueError, match=match) as e:
        ModuleTask("toy", sstq_fl.Task(model=model, train=toy(), test=toy(20, seed=1)))
    one_line(e)


class Pairs(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i].numpy(), int(self.y[i])


def test_datasets_and_numpy_are_materialised_and_natural_ids_kept():
    (x, y), ids = toy(), np.arange(40) % 4
    spec = sstq_fl.Task(model=mlp, train=Pairs(x, y), test=(x.numpy().astype(np.float64), y.numpy()), natural_ids=ids)
    task = ModuleTask("toy", spec, seed=1)
    assert torch.equal(task.data.x_train, x) and torch.equal(task.data.y_train, y)
    assert task.data.x_test.dtype == torch.float32 and task.data.y_test.dtype == torch.int64
    assert isinstance(task.natural_ids, np.ndarray) and (task.natural_ids == ids).all()
    assert task.dim == 5 * 8 + 8 + 8 * 3 + 3


def test_init_is_the_models_own_and_deterministic_per_seed():
    task = ModuleTask("toy", sstq_fl.Task(model=mlp, train=toy(), test=toy(20, seed=1)))
    before = torch.random.get_rng_state()
    a, b, c = task.init_params(3), task.init_params(3), task.init_params(4)
    assert torch.equal(torch.random.get_rng_state(), before)  # the global generator is left alone
    assert torch.equal(a, b) and not torch.equal(a, c) and a.dtype == torch.float32 and a.shape == (task.dim,)
    ev = task.evaluate(a)
    assert set(ev) == {"train_loss", "test_accuracy"} and 0 <= ev["test_accuracy"] <= 1


def test_the_three_gradient_methods_agree(caplog):
    with caplog.at_level(logging.INFO, logger="sstq_fl.fl"):
        task = ModuleTask("toy", sstq_fl.Task(model=mlp, train=toy(), test=toy(20, seed=1)))
    assert task.grad_method == "grouped" and task.grad_reason is None
    assert [r.getMessage() for r in caplog.records] == [
        "task toy: per-client gradients grouped (one forward and backward for all clients)"]
    theta, xb, yb = task.init_params(0), task.data.x_train.reshape(5, 8, 5), task.data.y_train.reshape(5, 8)
    grouped = task.client_grads(theta, xb, yb)
    task.grad_method = "vmap"
    batched = task.client_grads(theta, xb, yb)
    task.grad_method = "loop"
    looped = task.client_grads(theta, xb, yb)
    torch.testing.assert_close(grouped, batched, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(looped, batched, rtol=1e-6, atol=1e-7)
    single = torch.func.grad(task.loss)(theta, xb[2], yb[2])
    torch.testing.assert_close(looped[2], single, rtol=0, atol=0)


def test_a_batchnorm_model_takes_gradients_one_client_at_a_time_with_one_note(caplog):
    with caplog.at_level(logging.INFO, logger="sstq_fl.fl"):
        task = ModuleTask("bn", sstq_fl.Task(model=bn_model, train=toy(), test=toy(20, seed=1)))
        theta, xb, yb = task.init_params(0), task.data.x_train.reshape(5, 8, 5), task.data.y_train.reshape(5, 8)
        g1, g2 = task.client_grads(theta, xb, yb), task.client_grads(theta, xb, yb)
    notes = [r.getMessage() for r in caplog.records if r.name == "sstq_fl.fl"]
    assert notes == ["task bn: per-client gradients one client at a time (BatchNorm1d at '1' uses batch statistics)"]
    assert torch.equal(g1, g2)  # the running statistics are not updated: the same model every call
    torch.testing.assert_close(g1[3], torch.func.grad(task.loss)(theta, xb[3], yb[3]), rtol=0, atol=0)
    assert torch.equal(task.buffers["1.running_mean"], torch.zeros(8))


class Branchy(nn.Module):
    """Data-dependent control flow: ``vmap`` refuses it, one client at a time works."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, x):
        return self.lin(x) if x.sum() > -1e9 else -self.lin(x)


def test_a_model_vmap_cannot_run_falls_back_to_one_client_at_a_time(caplog):
    with caplog.at_level(logging.INFO, logger="sstq_fl.fl"):
        task = ModuleTask("branchy", sstq_fl.Task(model=Branchy, train=toy(), test=toy(20, seed=1)))
    theta, xb, yb = task.init_params(0), task.data.x_train.reshape(5, 8, 5), task.data.y_train.reshape(5, 8)
    g = task.client_grads(theta, xb, yb)
    assert g.shape == (5, task.dim) and task.grad_method == "loop" and task.grad_reason.startswith("vmap failed")
    assert "per-client gradients one client at a time (vmap failed" in caplog.text
    torch.testing.assert_close(g[1], torch.func.grad(task.loss)(theta, xb[1], yb[1]), rtol=0, atol=0)


def test_a_user_metric_and_a_regression_default():
    x = torch.randn(30, 5)
    reg = sstq_fl.Task(model=lambda: nn.Linear(5, 1), train=(x, x.sum(1)), test=(x, x.sum(1)))
    assert set(ModuleTask("reg", reg).evaluate(ModuleTask("reg", reg).init_params(0))) == {"train_loss", "test_loss"}
    cls = sstq_fl.Task(model=mlp, train=toy(), test=toy(20, seed=1), metric=lambda out, y: 0.25)
    task = ModuleTask("cls", cls)
    assert task.evaluate(task.init_params(0))["test_metric"] == 0.25


TASK_FILE = """
import torch, sstq_fl
from torch import nn

def make(records=40, classes=3):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(records, 5, generator=g), torch.randint(0, classes, (records,), generator=g)
    return sstq_fl.Task(model=lambda: nn.Linear(5, classes), train=(x, y), test=(x, y))

def not_a_task():
    return 42
"""


@pytest.fixture
def task_file(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mytask.py").write_text(textwrap.dedent(TASK_FILE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("pkg.mytask", None)
    sys.modules.pop("pkg", None)


def test_task_strings_resolve_a_file_and_a_module_with_params(task_file):
    cfg = RunConfig(task="pkg/mytask.py:make", task_params=' { "records" : 20 } ', clients=2)
    assert cfg.task == f"{task_file / 'pkg' / 'mytask.py'}:make" and cfg.task_params == '{"records":20}'
    by_file = tasks.make_task(cfg.task, 0, **cfg.task_kwargs())
    by_module = tasks.make_task("pkg.mytask:make", 0, task_params={"records": 20})
    assert isinstance(by_file, ModuleTask) and by_file.data.x_train.shape == (20, 5) == by_module.data.x_train.shape
    assert torch.equal(by_file.init_params(5), by_module.init_params(5))


@pytest.mark.parametrize("name, params, match", [
    ("nope.nothere:make", {}, r"task 'nope.nothere:make': no module named 'nope.nothere'"),
    ("pkg/missing.py:make", {}, r"task 'pkg/missing.py:make': no file .*missing.py"),
    ("pkg.mytask:absent", {}, r"task 'pkg.mytask:absent': pkg.mytask has no callable 'absent'"),
    ("pkg/mytask.py:make", {"epochs": 3}, r"task 'pkg/mytask.py:make': calling it with task params \{\"epochs\": 3\} "
                                          r"failed: TypeError: .*unexpected keyword argument 'epochs'"),
    ("pkg.mytask:not_a_task", {}, r"task 'pkg.mytask:not_a_task' returned int, not an sstq_fl.Task"),
    ("pkg.mytask:make", {"records": 0}, r"task 'pkg.mytask:make': Task train has no records"),
    ("lsq", {"dim": 3}, r"task 'lsq' takes no task params"),
    (":make", {}, r"task ':make': expected a registered name, PKG.MODULE:NAME or path/to/file.py:NAME"),
])
def test_bad_task_strings_are_one_line_errors_naming_them(task_file, name, params, match):
    with pytest.raises(ValueError, match=match) as e:
        tasks.make_task(name, 0, task_params=params)
    one_line(e)


@pytest.mark.parametrize("text, match", [("{records: 2}", "task-params must be a JSON object"),
                                         ("[1, 2]", "task-params must be a JSON object .* got a JSON list")])
def test_task_params_must_be_a_json_object(text, match):
    with pytest.raises(ValueError, match=match) as e:
        RunConfig(task_params=text)
    one_line(e)


def test_a_registered_task_function_returning_a_user_task_is_wrapped():
    state = tasks.TASKS.snapshot()
    try:
        tasks.TASKS.register("toy-user", lambda records=40: sstq_fl.Task(model=mlp, train=toy(records), test=toy(10)))
        task = tasks.make_task("toy-user", 0, task_params={"records": 16}, dim=3)
        assert isinstance(task, ModuleTask) and task.data.x_train.shape == (16, 5)
    finally:
        tasks.TASKS.restore(state)
