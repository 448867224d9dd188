"""The engines' view of a learning task: a flat parameter vector θ, a per-client batch loss, batched
per-client gradients and evaluation.

Per-client gradients for a whole round come by default from one batched forward/backward
(``torch.func.vmap`` over clients of ``torch.func.grad``); a task may compute them faster (the
built-in MLP and a user's model group them: :mod:`sstq_fl.fl.grouped`).  Its own module so that both the
built-in tasks (:mod:`sstq_fl.fl.tasks`) and the adapter of a user's model
(:mod:`sstq_fl.fl.module_task`) derive from it without importing each other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch.func import grad, vmap


@dataclass
class Dataset:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


class EngineTask(ABC):
    name: str
    dim: int
    data: Dataset
    grad_method: str = "vmap"
    """How :meth:`client_grads` computes: ``grouped`` (one forward and backward for all clients,
    :mod:`sstq_fl.fl.grouped`), ``vmap`` (batched over clients) or ``loop`` (one client at a time)."""

    @abstractmethod
    def init_params(self, seed: int) -> torch.Tensor: ...

    @abstractmethod
    def loss(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean loss of one client's batch."""

    def client_grads(self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor,
                     out: torch.Tensor | None = None) -> torch.Tensor:
        """Per-client gradients ``[clients, d]`` of each client's mean batch loss (into ``out`` when given: a
        buffer the caller reuses)."""
        return into(out, vmap(grad(self.loss), in_dims=(None, 0, 0))(theta, xb, yb))

    @abstractmethod
    def evaluate(self, theta: torch.Tensor) -> dict[str, float]: ...


def into(out: torch.Tensor | None, value: torch.Tensor) -> torch.Tensor:
    """``value``, copied into ``out`` when one is given (the ``out`` of :meth:`EngineTask.client_grads`)."""
    return value if out is None else out.copy_(value)
