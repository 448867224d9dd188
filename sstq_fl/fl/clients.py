"""The clients' side of a run (:class:`ClientData`): the task, each client's shard, and what one client (or a batch
of clients, vectorized) computes in a round before anything leaves it: minibatch gradients, then wire messages or
secure-aggregation shares.  The vectorized engine and the Flower nodes both call it."""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any

import numpy as np
import torch

from .. import wire
from ..config.partition import PartitionOptions
from ..config.train import RunConfig
from ..data.partitioners import PARTITIONERS
from ..encoders import Encoder
from ..stages import stage
from .round_draws import client_coins, encoder_seeds, minibatches
from .tasks import EngineTask, make_task


def options_for(cfg: RunConfig, task: EngineTask | None = None) -> PartitionOptions:
    """The partitioners' parameters of a run: ``cfg``'s, and the task's ``natural_ids`` if it has them."""
    return PartitionOptions.of(cfg, getattr(task, "natural_ids", None))


def partition_for(cfg: RunConfig, task: EngineTask) -> list[np.ndarray]:
    """Each client's training records in a run: ``cfg.partition``'s partitioner
    (:data:`~sstq_fl.data.partitioners.PARTITIONERS`) over the task's training labels.  Every client must
    hold a record (a client without data cannot draw a minibatch)."""
    labels = task.data.y_train.detach().cpu().numpy()
    shards = PARTITIONERS[cfg.partition](labels, cfg.clients, cfg.seed, options_for(cfg, task))
    empty = [k for k, s in enumerate(shards) if len(s) == 0]
    if empty:
        raise ValueError(f"partition {cfg.partition} left {len(empty)} of {cfg.clients} clients without records "
                         f"(client {empty[0]} first); raise min-partition-size or use fewer clients")
    return shards


class ClientData:
    """The clients' side of a run: the task and each client's shard of the training records.

    A client holds only this (no encoder, no ledger): :meth:`gradients` is what one client (or a
    batch of clients, vectorized) computes before its update is encoded."""

    def __init__(self, cfg: RunConfig, task: EngineTask | None = None):
        self.cfg = cfg
        self.task = task or make_task(cfg.task, cfg.seed, **cfg.task_kwargs())
        self.shards = partition_for(cfg, self.task)
        self.buffers: dict[str, torch.Tensor] = {}
        self.device = torch.device(cfg.device)
        self.x_train = self.task.data.x_train.to(self.device)  # the task's own tensors where the device is the CPU
        self.y_train = self.task.data.y_train.to(self.device)

    def gradients(self, theta: torch.Tensor, t: int, ids: np.ndarray, keys: np.ndarray | None) -> tuple[torch.Tensor, int]:
        """Round ``t``'s minibatch gradients of clients ``ids`` (``[n, d]``; minibatches from ``keys``
        in secure mode, else from ``(seed, t, client)``) and how many were non-finite (replaced by
        the public null input ``0``)."""
        cfg, theta = self.cfg, theta.to(self.device)
        with stage("gather"):
            idx = minibatches([self.shards[c] for c in ids], cfg.batch, cfg.seed, t, ids, keys=keys)
            xb, yb = self.gathered(self.x_train, idx, "x"), self.gathered(self.y_train, idx, "y")
        with stage("gradients"):
            if self.takes_out():
                grads = self.task.client_grads(theta, xb, yb, out=self.grad_buffer(len(ids), theta)).detach()
            else:  # a task written before client_grads took ``out``
                grads = self.task.client_grads(theta, xb, yb).detach()
            bad = ~torch.isfinite(torch.linalg.vector_norm(grads, dim=1))  # one pass; what clipping would zero too
            grads[bad] = 0.0
        return grads, int(bad.sum())

    def takes_out(self) -> bool:
        """Whether the task's ``client_grads`` (possibly replaced on the instance) takes an ``out`` buffer."""
        method = self.task.client_grads
        return _takes_out(getattr(method, "__func__", method))

    def grad_buffer(self, clients: int, theta: torch.Tensor) -> torch.Tensor:
        """A ``[clients, d]`` buffer for the round's gradients, reused by the next round (the gradients are not
        kept past the round's encode)."""
        return self.reused("g", (clients, self.task.dim), theta.dtype, theta.device)

    def reused(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A tensor of ``shape`` in this object's buffer ``name`` (grown on demand)."""
        buf = self.buffers.get(name)
        if buf is None or buf.dtype != dtype or buf.device != device or buf.numel() < math.prod(shape):
            buf = self.buffers[name] = torch.empty(math.prod(shape), dtype=dtype, device=device)
        return buf[: math.prod(shape)].view(shape)

    def gathered(self, data: torch.Tensor, idx: np.ndarray, name: str) -> torch.Tensor:
        """``data[idx]`` (``[n, B, …]``) in a buffer this object reuses for its next gather (a large fresh tensor
        pays its page faults every round; the batch is not kept past the round's gradients)."""
        flat = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64).reshape(-1))
        out = self.reused(name, (flat.numel(), *data.shape[1:]), data.dtype, data.device)
        return torch.index_select(data, 0, flat.to(data.device), out=out).view(*idx.shape, *data.shape[1:])

    def messages(self, enc: Encoder, theta: torch.Tensor, t: int, ids: np.ndarray) -> tuple[list[bytes], dict[str, float]]:
        """Round ``t``'s wire messages of clients ``ids``, batched: minibatch, gradient, clip, encode.

        Each client keys its own coins: in secure mode a fresh OS-CSPRNG key per client, drawn here
        (on the client, or the node hosting it) and never returned; in reproducible mode the
        ``(seed, t, client)`` seeds.  Also the encoder's data-dependent statistics, only with
        ``diagnostics`` (reproducible mode).  The one copy of a round's client side: the
        vectorized engine (:meth:`Trainer.client_messages`) and a Flower cohort node both call it."""
        cfg = self.cfg
        if not len(ids):
            return [], {}
        keys = client_coins(cfg.randomness, cfg.seed, t, ids)  # secure mode: drawn here, on the client
        grads, bad = self.gradients(theta, t, ids, keys)
        enc = enc.for_round(t)  # the round's public frame (draw=round), drawn after the gradients
        msgs = enc.encode(grads, encoder_seeds(cfg.seed, t, ids) if keys is None else keys)
        stats = {**msgs.stats, "nonfinite_gradients": float(bad)} if cfg.diagnostics else {}
        with stage("wire"):
            return wire.pack(enc, msgs, round=t), stats

    def shares(self, sa: Any, theta: torch.Tensor, t: int, ids: np.ndarray) -> np.ndarray:
        """Round ``t``'s secure-aggregation shares of clients ``ids`` (:class:`~.secure_aggregation.SecureAggregation`):
        minibatch, gradient, clip, rotate, round, noise, reduce mod ``m``.  Secure mode: each client's fresh key,
        drawn here (on the client) and never returned.  The one copy of a round's client side under ``secagg``: the
        vectorized engine and a Flower SecAgg+ node both call it."""
        keys = client_coins(self.cfg.randomness, self.cfg.seed, t, ids)
        grads, _ = self.gradients(theta, t, ids, keys)
        return sa.shares(grads, t, ids, keys)


@functools.lru_cache(maxsize=64)
def _takes_out(fn: Any) -> bool:
    """Whether ``fn`` has a parameter ``out`` (read once per function, not once per round)."""
    try:
        return "out" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
