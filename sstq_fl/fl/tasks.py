"""Learning tasks: a flat parameter vector, batched per-client gradients, and evaluation.

Per-client gradients for a whole round come from one batched forward/backward
(``torch.func.vmap`` over clients of ``torch.func.grad``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.func import grad, vmap

from .. import rng
from ..registry import Registry


@dataclass
class Dataset:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


class Task(ABC):
    name: str
    dim: int
    data: Dataset

    @abstractmethod
    def init_params(self, seed: int) -> torch.Tensor: ...

    @abstractmethod
    def loss(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean loss of one client's batch."""

    def client_grads(self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """Per-client gradients ``[clients, d]`` of each client's mean batch loss."""
        return vmap(grad(self.loss), in_dims=(None, 0, 0))(theta, xb, yb)

    @abstractmethod
    def evaluate(self, theta: torch.Tensor) -> dict[str, float]: ...


class MLPTask(Task):
    """MLP ``in → hidden (ReLU) → classes`` on flat features; cross-entropy loss."""

    def __init__(self, name: str, data: Dataset, hidden: int = 32, classes: int = 10):
        self.name, self.data = name, data
        self.n_in, self.hidden, self.classes = data.x_train.shape[1], hidden, classes
        self.shapes = [(self.n_in, hidden), (hidden,), (hidden, classes), (classes,)]
        self.dim = sum(math.prod(s) for s in self.shapes)

    def unflatten(self, theta: torch.Tensor) -> list[torch.Tensor]:
        out, off = [], 0
        for s in self.shapes:
            n = math.prod(s)
            out.append(theta[off : off + n].reshape(s))
            off += n
        return out

    def forward(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        w1, b1, w2, b2 = self.unflatten(theta)
        return torch.relu(x @ w1 + b1) @ w2 + b2

    def loss(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.forward(theta, x), y)

    def init_params(self, seed: int) -> torch.Tensor:
        """PyTorch's default ``nn.Linear`` init (uniform ±1/√fan_in), from counter-based draws."""
        s = np.array([rng.derive_seed(seed, 0x1417)], np.uint64)
        u = torch.from_numpy(rng.uniform(s, "init", self.dim)[0]).float() * 2 - 1
        parts, off = [], 0
        for shape, fan_in in zip(self.shapes, [self.n_in, self.n_in, self.hidden, self.hidden]):
            n = math.prod(shape)
            parts.append(u[off : off + n] / math.sqrt(fan_in))
            off += n
        return torch.cat(parts)

    def evaluate(self, theta: torch.Tensor) -> dict[str, float]:
        with torch.no_grad():
            d = self.data
            train_loss = float(torch.nn.functional.cross_entropy(self.forward(theta, d.x_train), d.y_train))
            acc = float((self.forward(theta, d.x_test).argmax(1) == d.y_test).float().mean())
        return {"train_loss": train_loss, "test_accuracy": acc}


class LeastSquaresTask(Task):
    """E2: ``L(θ) = (1/2n)‖Aθ − b‖²`` with ``A_ij ~ N(0, 1)``, ``b = Aθ_true + σ ξ``; metric ``‖θ − θ*‖²``
    (``θ*`` the least-squares fit).  ``θ_true ~ N(0, s² I)``: the default ``s = 1/√d`` keeps
    ``‖θ_true‖ ≈ 1`` at every ``d`` (clean training converges; our own default), ``s = 1`` is the regime
    of SSTQ's authors' least squares, where ``‖θ₀ − θ*‖² ≈ d`` grows with ``d`` and clean is still far
    from ``θ*`` after 100 clipped steps."""

    def __init__(self, dim: int, n: int, seed: int, noise: float = 0.1, theta_scale: float | None = None):
        if not (noise >= 0 and math.isfinite(noise)):
            raise ValueError(f"lsq noise must be a finite number >= 0, got {noise}")
        if theta_scale is not None and not (theta_scale > 0 and math.isfinite(theta_scale)):
            raise ValueError(f"lsq theta scale must be positive and finite, got {theta_scale}")
        s = np.array([rng.derive_seed(seed, 0x15A)], np.uint64)
        a = torch.from_numpy(rng.normal(s, "lsq-A", n * dim)[0].reshape(n, dim))
        scale = 1 / math.sqrt(dim) if theta_scale is None else theta_scale
        theta_true = torch.from_numpy(rng.normal(s, "lsq-theta", dim)[0]) * scale
        b = a @ theta_true + noise * torch.from_numpy(rng.normal(s, "lsq-noise", n)[0])
        self.name, self.dim = "lsq", dim
        self.data = Dataset(a, b, a, b)
        self.theta_star = torch.linalg.lstsq(a, b[:, None]).solution[:, 0]

    def init_params(self, seed: int) -> torch.Tensor:
        return torch.zeros(self.dim, dtype=torch.float64)

    def loss(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((x @ theta - y) ** 2).mean()

    def evaluate(self, theta: torch.Tensor) -> dict[str, float]:
        d = self.data
        return {"train_loss": float(0.5 * ((d.x_train @ theta - d.y_train) ** 2).mean()),
                "distance_to_optimum": float(((theta - self.theta_star) ** 2).sum())}


TaskFactory = Callable[..., Task]
"""Builds a task: ``factory(seed, **kwargs) -> Task``; ``kwargs`` are :meth:`RunConfig.task_kwargs`
(``data_dir``, ``dim``, ``n``, ``noise``, ``theta_scale``), of which a task uses those it needs."""

TASKS: Registry[TaskFactory] = Registry("FL task", group="sstq_fl.tasks", accepts=callable,
                                        kind="a task factory (seed, **kwargs) -> Task")
"""The FL tasks by name: the built-ins below, then the ``sstq_fl.tasks`` entry points (each a
:data:`TaskFactory`).  The built-ins are registered in this module, so the registry needs no
``builtins=`` modules."""


@TASKS.register("fmnist")
def fmnist_task(seed: int, **kw: Any) -> Task:
    """MLP 784-32-10 on Fashion-MNIST (``data_dir``, else the loader's default locations)."""
    from ..data.idx import load_fashion_mnist

    xtr, ytr, xte, yte = load_fashion_mnist(kw.get("data_dir"))
    return MLPTask("fmnist", _tensors(xtr, ytr, xte, yte))


@TASKS.register("cifar10")
def cifar10_task(seed: int, **kw: Any) -> Task:
    """MLP 3072-32-10 on CIFAR-10 (``data_dir`` required: the extracted python batches)."""
    from ..data.cifar import load_cifar10

    if not kw.get("data_dir"):
        raise ValueError("task cifar10 needs --data-dir pointing at the extracted cifar-10-batches-py folder")
    return MLPTask("cifar10", _tensors(*load_cifar10(kw["data_dir"])))


@TASKS.register("lsq")
def lsq_task(seed: int, **kw: Any) -> Task:
    """E2's least squares (``dim``, ``n``, ``noise``, ``theta_scale``)."""
    return LeastSquaresTask(int(kw.get("dim", 100)), int(kw.get("n", 4000)), seed,
                            noise=float(kw.get("noise", 0.1)), theta_scale=kw.get("theta_scale"))


def make_task(name: str, seed: int = 0, **kw: Any) -> Task:
    """The task ``name`` built by its registered factory; an unknown name is a one-line error listing
    the registered ones."""
    return TASKS[name](seed, **kw)


def _tensors(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, yte: np.ndarray) -> Dataset:
    return Dataset(torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte), torch.from_numpy(yte))
