"""The FL tasks by name: the built-in ones (MLPs, least squares), plug-ins, and a user's own task
(``PKG.MODULE:NAME`` or ``path/to/file.py:NAME``, where ``NAME(**params)`` returns a
:class:`sstq_fl.Task`), all resolved by :func:`make_task` into the engines' :class:`~sstq_fl.fl.engine_task.EngineTask`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import rng
from ..checks import check_array
from ..config.train import split_task
from ..errors import described, first_line
from ..registry import Registry
from .engine_task import Dataset, EngineTask
from .grouped import clients_outer

__all__ = ["TASKS", "Dataset", "EngineTask", "LeastSquaresTask", "MLPTask", "TaskFactory", "make_task"]


class MLPTask(EngineTask):
    """MLP ``in → hidden (ReLU) → classes`` on flat features; cross-entropy loss."""

    grad_method = "grouped"

    def __init__(self, name: str, data: Dataset, hidden: int = 32, classes: int = 10):
        self.name, self.data = name, data
        self.n_in, self.hidden, self.classes = data.x_train.shape[1], hidden, classes
        self.shapes = [(self.n_in, hidden), (hidden,), (hidden, classes), (classes,)]
        self.dim = sum(math.prod(s) for s in self.shapes)

    def unflatten(self, theta: torch.Tensor) -> list[torch.Tensor]:
        return [theta[a:b].reshape(s) for a, b, s in self.slices()]

    def forward(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        w1, b1, w2, b2 = self.unflatten(theta)
        return torch.relu(x @ w1 + b1) @ w2 + b2

    def loss(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.forward(theta, x), y)

    def client_grads(self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor,
                     out: torch.Tensor | None = None) -> torch.Tensor:
        """Per-client gradients, grouped (:mod:`sstq_fl.fl.grouped`): one forward over all ``C·B`` records, one
        backward of ``Σ_c L_c`` to the two layers' pre-activations ``z₁, z₂``, then per client
        ``∇W₁ = Σ_b x_bᵀ ∂z₁``, ``∇b₁ = Σ_b ∂z₁`` (and the same for layer 2)."""
        clients, batch = xb.shape[:2]
        w1, b1, w2, b2 = self.unflatten(theta.detach())
        x, y = xb.reshape(clients * batch, -1), yb.reshape(-1)
        with torch.enable_grad():
            z1 = torch.addmm(b1, x, w1).requires_grad_()
            a1 = torch.relu(z1)
            z2 = torch.addmm(b2, a1, w2)
            per = torch.nn.functional.cross_entropy(z2, y, reduction="none").reshape(clients, batch)
            g1, g2 = torch.autograd.grad(per.mean(1).sum(), [z1, z2])
        flat = torch.empty(clients, self.dim, dtype=x.dtype, device=x.device) if out is None else out
        gw1, gb1, gw2, gb2 = (flat[:, a:b].view(clients, *s) for a, b, s in self.slices())
        clients_outer(x, g1, clients, out=gw1)
        torch.sum(g1.reshape(clients, batch, -1), 1, out=gb1)
        clients_outer(a1.detach(), g2, clients, out=gw2)
        torch.sum(g2.reshape(clients, batch, -1), 1, out=gb2)
        return flat

    def slices(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """``(start, end, shape)`` of each parameter in θ."""
        out, off = [], 0
        for s in self.shapes:
            out.append((off, off + math.prod(s), s))
            off += math.prod(s)
        return out

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


class LeastSquaresTask(EngineTask):
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
        check_array(f"lsq data A (n × dim = {n} × {dim})", n * dim)
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


TaskFactory = Callable[..., EngineTask]
"""Builds a task: ``factory(seed, **kwargs) -> EngineTask``; ``kwargs`` are :meth:`RunConfig.task_kwargs`
(``data_dir``, ``dim``, ``n``, ``noise``, ``theta_scale``) and the run's task params, of which a task
uses those it needs.  A registered callable without a first parameter ``seed`` is a user's task
function instead: ``NAME(**task_params) -> sstq_fl.Task``."""

TASKS: Registry[Callable[..., Any]] = Registry(
    "FL task", group="sstq_fl.tasks", accepts=callable,
    kind="a task factory (seed, **kwargs) -> EngineTask or NAME(**params) -> sstq_fl.Task")
"""The FL tasks by name: the built-ins below, then the ``sstq_fl.tasks`` entry points (each a
:data:`TaskFactory`).  The built-ins are registered in this module, so the registry needs no
``builtins=`` modules."""


@TASKS.register("fmnist")
def fmnist_task(seed: int, **kw: Any) -> EngineTask:
    """MLP 784-32-10 on Fashion-MNIST (``data_dir``, else the loader's default locations)."""
    from ..data.idx import load_fashion_mnist

    xtr, ytr, xte, yte = load_fashion_mnist(kw.get("data_dir"))
    return MLPTask("fmnist", _tensors(xtr, ytr, xte, yte))


@TASKS.register("cifar10")
def cifar10_task(seed: int, **kw: Any) -> EngineTask:
    """MLP 3072-32-10 on CIFAR-10 (``data_dir`` required: the extracted python batches)."""
    from ..data.cifar import load_cifar10

    if not kw.get("data_dir"):
        raise ValueError("task cifar10 needs --data-dir pointing at the extracted cifar-10-batches-py folder")
    return MLPTask("cifar10", _tensors(*load_cifar10(kw["data_dir"])))


@TASKS.register("lsq")
def lsq_task(seed: int, **kw: Any) -> EngineTask:
    """E2's least squares (``dim``, ``n``, ``noise``, ``theta_scale``)."""
    return LeastSquaresTask(int(kw.get("dim", 100)), int(kw.get("n", 4000)), seed,
                            noise=float(kw.get("noise", 0.1)), theta_scale=kw.get("theta_scale"))


BUILTIN_TASKS = ("fmnist", "cifar10", "lsq")
"""The registered tasks of this package: their options are ``RunConfig`` fields, so they take no task params."""


def make_task(name: str, seed: int = 0, task_params: dict[str, Any] | None = None, **kw: Any) -> EngineTask:
    """The task ``name``: a registered name (an unknown one is a one-line error listing the registered
    ones), or ``PKG.MODULE:NAME`` / ``path/to/file.py:NAME``, called as ``NAME(**task_params)``.

    A registered factory whose first parameter is ``seed`` is a :data:`TaskFactory`, called as
    ``factory(seed, **kw, **task_params)``; any other is called as ``factory(**task_params)``.  Either
    may return an :class:`EngineTask` or a user's :class:`sstq_fl.Task` (run by
    :class:`~sstq_fl.fl.module_task.ModuleTask`).  Every failure is a one-line ``ValueError`` naming ``name``."""
    params = dict(task_params or {})
    if split_task(name) is not None:
        return _built(name, resolve(name), seed, params, {})
    if params and name in BUILTIN_TASKS:
        raise ValueError(f"task {name!r} takes no task params (its options are run options), got {json.dumps(params)}")
    return _built(name, TASKS[name], seed, params, kw)


def _built(name: str, factory: Callable[..., Any], seed: int, params: dict[str, Any], kw: dict[str, Any]) -> EngineTask:
    """``factory``'s task (see :func:`make_task`), a user's :class:`sstq_fl.Task` wrapped for the engines."""
    from .module_task import ModuleTask
    from .user_task import Task

    takes_seed = next(iter(_parameters(factory)), None) == "seed"
    try:
        made = factory(seed, **{**kw, **params}) if takes_seed else factory(**params)
    except (ArithmeticError, LookupError, RuntimeError, AttributeError, AssertionError, OSError, SystemExit) as exc:
        if name in BUILTIN_TASKS and isinstance(exc, OSError):
            raise
        raise ValueError(f"{where_of(name)}: factory {getattr(factory, '__name__', name)} raised "
                         f"{described(exc) if str(exc) else type(exc).__name__}") from None
    except TypeError as exc:
        raise ValueError(f"task {name!r}: calling it with task params {json.dumps(params)} failed: {described(exc)}") \
            from None
    except ValueError as exc:
        if name in BUILTIN_TASKS:  # their messages name them
            raise
        raise ValueError(f"task {name!r}: {first_line(exc)}") from None
    if isinstance(made, EngineTask):
        return made
    if not isinstance(made, Task):
        raise ValueError(f"task {name!r} returned {type(made).__name__}, not an sstq_fl.Task")
    try:
        return ModuleTask(name, made, seed, where_of(name))
    except ValueError as exc:
        raise ValueError(f"task {name!r}: {exc}") from None


def where_of(name: str) -> str:
    """``task file X.py`` / ``task module PKG.MODULE`` / ``task NAME``: how messages about user code name the task."""
    parts = split_task(name)
    if parts is None:
        return f"task {name}"
    return f"task file {parts[0]}" if parts[0].endswith(".py") else f"task module {parts[0]}"


def _parameters(fn: Callable[..., Any]) -> list[str]:
    """The names of ``fn``'s parameters (none where its signature cannot be read)."""
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def resolve(name: str) -> Callable[..., Any]:
    """The callable a ``PKG.MODULE:NAME`` or ``path/to/file.py:NAME`` task string names."""
    parts = split_task(name)
    if parts is None or not all(parts):
        raise ValueError(f"task {name!r}: expected a registered name, PKG.MODULE:NAME or path/to/file.py:NAME")
    where, attr = parts
    module = _load_file(name, Path(where)) if where.endswith(".py") else _import(name, where)
    obj = getattr(module, attr, None)
    if not callable(obj):
        raise ValueError(f"task {name!r}: {where} has no callable {attr!r}")
    return obj  # type: ignore[no-any-return]


def _import(name: str, module: str) -> types.ModuleType:
    """``module`` imported, the working directory on ``sys.path`` first (as ``python -m`` has it; Flower
    passes the driver's ``sys.path`` to its Ray workers)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise ValueError(f"task {name!r}: no module named {module!r} (on sys.path or in {cwd})") from None
        raise ValueError(f"task {name!r}: importing {module} failed: {described(exc)}") from None
    except (Exception, SystemExit) as exc:  # the user's module: any failure is a one-line refusal
        raise ValueError(f"task {name!r}: importing {module} failed: {described(exc)}") from None


def _load_file(name: str, path: Path) -> types.ModuleType:
    """The Python file ``path`` loaded as a module (once per process and path)."""
    path = path.resolve()
    if not path.is_file():
        raise ValueError(f"task {name!r}: no file {path}")
    key = "sstq_fl_user_task_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # the user's file: any failure (sys.exit too) is a one-line refusal
        del sys.modules[key]
        raise ValueError(f"task {name!r}: loading {path} failed: {described(exc)}") from None
    return module


def _tensors(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, yte: np.ndarray) -> Dataset:
    return Dataset(torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte), torch.from_numpy(yte))
