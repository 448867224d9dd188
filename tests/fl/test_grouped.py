"""Grouped per-client gradients (:mod:`sstq_fl.fl.grouped`): every supported layer type against ``vmap``'s
gradients, the built-in MLP's explicit form, and the refusals (unsupported layers, a model that mixes records)."""

import logging
import math

import pytest
import torch
from torch import nn

import sstq_fl
from sstq_fl.fl import module_task
from sstq_fl.fl.engine_task import Dataset, EngineTask
from sstq_fl.fl.grouped import grouped_reason
from sstq_fl.fl.module_task import ModuleTask
from sstq_fl.fl.tasks import MLPTask

CLIENTS, BATCH = 4, 3


def images(n: int = 24, classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 6, 6, generator=g), torch.randint(0, classes, (n,), generator=g)


def series(n: int = 24, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, 9, generator=g), torch.randint(0, 3, (n,), generator=g)


def tokens(n: int = 24, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 10, (n, 6), generator=g), torch.randint(0, 3, (n,), generator=g)


class MeanPool(nn.Module):
    def forward(self, x):
        return x.mean(1)


class Tied(nn.Module):
    """An embedding and an output layer sharing one weight."""

    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(10, 4, padding_idx=0), nn.Linear(4, 10, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, x):
        return self.out(self.emb(x).mean(1))[:, :3]


class Centred(nn.Module):
    """Subtracts the batch mean: the records of a batch interact (no batch-norm layer to name)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, x):
        return self.lin(x - x.mean(0))


MODELS = {
    "conv2d+groupnorm": (lambda: nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, stride=2), nn.GroupNorm(2, 4), nn.ReLU(),
                                               nn.Flatten(), nn.Linear(36, 3)), images),
    "conv1d+layernorm": (lambda: nn.Sequential(nn.Conv1d(2, 3, 3, dilation=2), nn.LayerNorm(5), nn.Tanh(),
                                               nn.Flatten(), nn.Linear(15, 3, bias=False)), series),
    "embedding+layernorm": (lambda: nn.Sequential(nn.Embedding(10, 4, padding_idx=0), MeanPool(), nn.LayerNorm(4),
                                                  nn.Linear(4, 3)), tokens),
    "tied": (Tied, tokens),
    "linear-on-sequences": (lambda: nn.Sequential(nn.Linear(9, 4), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3)), series),
}


def blocks(task: ModuleTask) -> tuple[torch.Tensor, torch.Tensor]:
    n = CLIENTS * BATCH
    x, y = task.data.x_train[:n], task.data.y_train[:n]
    return x.reshape(CLIENTS, BATCH, *x.shape[1:]), y.reshape(CLIENTS, BATCH)


@pytest.mark.parametrize("name", list(MODELS))
def test_grouped_gradients_equal_vmap_for_every_supported_layer(name):
    model, data = MODELS[name]
    task = ModuleTask(name, sstq_fl.Task(model=model, train=data(), test=data(seed=1)))
    assert task.grad_method == "grouped", task.grad_reason
    theta = task.init_params(0) + 0.1 * torch.randn(task.dim, generator=torch.Generator().manual_seed(1))
    xb, yb = blocks(task)
    grouped = task.client_grads(theta, xb, yb)
    reference = EngineTask.client_grads(task, theta, xb, yb)
    assert grouped.shape == (CLIENTS, task.dim) and float(reference.abs().min(1).values.max()) >= 0
    torch.testing.assert_close(grouped, reference, rtol=1e-5, atol=1e-6)
    assert float(grouped.abs().sum(1).min()) > 0  # every client got a gradient


def test_grouped_passes_split_clients_and_give_the_same_gradients(monkeypatch):
    model, data = MODELS["conv2d+groupnorm"]
    task = ModuleTask("conv", sstq_fl.Task(model=model, train=data(), test=data(seed=1)))
    theta, (xb, yb) = task.init_params(0), blocks(task)
    whole = task.client_grads(theta, xb, yb)
    monkeypatch.setattr(module_task, "GROUPED_RECORDS", BATCH)  # one client per pass
    torch.testing.assert_close(task.client_grads(theta, xb, yb), whole, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("model, reason", [
    (lambda: nn.Sequential(nn.Linear(5, 4), nn.PReLU(), nn.Linear(4, 3)),
     "PReLU at '1' has parameters and no grouped gradient rule"),
    (lambda: nn.Sequential(nn.Unflatten(1, (1, 5)), nn.Conv1d(1, 2, 3, padding="same"), nn.Flatten(), nn.Linear(10, 3)),
     "Conv1d at '1' is padding 'same' / zeros"),
])
def test_unsupported_layers_are_named_and_take_vmap(model, reason, caplog):
    x, y = torch.randn(24, 5), torch.randint(0, 3, (24,))
    with caplog.at_level(logging.INFO, logger="sstq_fl.fl"):
        task = ModuleTask("odd", sstq_fl.Task(model=model, train=(x, y), test=(x, y)))
    assert (task.grad_method, task.grad_reason) == ("vmap", reason)
    assert f"per-client gradients batched over clients (vmap) ({reason})" in caplog.text
    assert grouped_reason(model()) == reason


def test_a_model_that_mixes_the_records_of_a_batch_is_caught_by_the_probe():
    x, y = torch.randn(24, 5), torch.randint(0, 3, (24,))
    task = ModuleTask("centred", sstq_fl.Task(model=Centred, train=(x, y), test=(x, y)))
    assert task.grad_method == "vmap" and "differ from vmap's" in task.grad_reason


def test_an_inplace_activation_after_a_layer_is_caught_by_the_probe():
    """``ReLU(inplace=True)`` rewrites the captured layer output: the probe must see the wrong gradients."""
    x, y = torch.randn(24, 5), torch.randint(0, 3, (24,))
    task = ModuleTask("inplace", sstq_fl.Task(model=lambda: nn.Sequential(nn.Linear(5, 8), nn.ReLU(inplace=True),
                                                                            nn.Linear(8, 3)), train=(x, y), test=(x, y)))
    assert task.grad_method == "vmap" and "differ from vmap's" in task.grad_reason
    theta, (xb, yb) = task.init_params(0), blocks(task)
    torch.testing.assert_close(task.client_grads(theta, xb, yb), EngineTask.client_grads(task, theta, xb, yb),
                               rtol=1e-5, atol=1e-6)


def test_the_builtin_mlp_gradients_equal_vmap():
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(60, 20, generator=g), torch.randint(0, 10, (60,), generator=g)
    task = MLPTask("mlp", Dataset(x, y, x, y), hidden=7)
    theta = task.init_params(3)
    xb, yb = x[:48].reshape(6, 8, 20), y[:48].reshape(6, 8)
    grouped = task.client_grads(theta, xb, yb)
    torch.testing.assert_close(grouped, EngineTask.client_grads(task, theta, xb, yb), rtol=1e-5, atol=1e-7)
    assert grouped.shape == (6, task.dim) == (6, 20 * 7 + 7 + 7 * 10 + 10)
    assert math.isclose(float(grouped[0, -10:].sum()), 0.0, abs_tol=1e-6)  # softmax − one-hot sums to zero
