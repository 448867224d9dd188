"""Any ``torch.nn.Module`` as an engine task: the model's parameters are the flat vector θ.

The forward pass is ``torch.func.functional_call`` with the parameters unflattened from θ, so one
model serves every client, the server and every seed.  Per-client gradients of a round come from
the fastest of three paths that gives them, chosen once per task and logged with its reason:
*grouped* (one forward and one backward over every client's records, :mod:`sstq_fl.fl.grouped`)
where every parameter sits in a supported layer and the grouped gradients match ``vmap``'s on a
probe batch; else one ``vmap(grad(loss))`` over clients; else (a model whose training-mode
forward mixes the records of a batch, such as batch normalisation, or that ``vmap`` cannot run)
one client at a time.  All three give the same gradients to float rounding.

Buffers (batch-norm running statistics) are not part of θ and are not federated: every forward
runs on a copy of the module's initial buffers, so the server, each engine and each Ray actor
evaluate the same model for the same θ.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import torch
from torch.func import functional_call, grad

from .. import rng
from ..errors import described, user_code
from .engine_task import Dataset, EngineTask, into
from .grouped import grouped_reason, layer_grads, per_client_loss
from .user_task import Task

log = logging.getLogger("sstq_fl.fl")
EVAL_CHUNK = 1024
"""Records per forward pass in :meth:`ModuleTask.evaluate` (bounds its memory)."""
GROUPED_RECORDS = 1 << 16
"""Records per grouped forward/backward pass (whole clients; bounds the activations' memory)."""
PROBE_CLIENTS, PROBE_RECORDS = 3, 2
"""The probe batch on which grouped gradients must match ``vmap``'s before they are used."""
PROBE_RTOL = 1e-4
"""Largest ``max |grouped − vmap| / max |vmap|`` accepted on the probe (float32 rounding is ~1e-7)."""


class ModuleTask(EngineTask):
    """A :class:`~sstq_fl.fl.user_task.Task` run on a flat parameter vector (``dim`` = the model's parameter count)."""

    def __init__(self, name: str, spec: Task, seed: int = 0, where: str | None = None):
        self.name, self.spec, self.where = name, spec, where or f"task {name}"
        self.module = self.build(seed)
        params = dict(self.module.named_parameters())
        if not params:
            raise ValueError(f"Task model {type(self.module).__name__} has no parameters to train")
        dtypes = sorted({str(p.dtype) for p in params.values()})
        if len(dtypes) > 1 or not next(iter(params.values())).is_floating_point():
            raise ValueError(f"Task model's parameters must share one floating dtype, got {', '.join(dtypes)}")
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.numels = [p.numel() for p in params.values()]
        self.dtype, self.dim = next(iter(params.values())).dtype, sum(self.numels)
        self.buffers = {k: b.detach().clone() for k, b in self.module.named_buffers()}
        self.integer = spec.integer_labels
        (xtr, ytr), (xte, yte) = spec.train, spec.test
        self.data = Dataset(self._x(xtr), self._y(ytr), self._x(xte), self._y(yte))
        self.natural_ids = spec.natural_ids
        self.check_output()
        self.slots = self.parameter_slots()
        self.grad_method, self.grad_reason = self.pick_gradients()
        log.info("task %s: per-client gradients %s%s", self.name, GRAD_METHODS[self.grad_method],
                 f" ({self.grad_reason})" if self.grad_reason else "")

    def build(self, seed: int) -> torch.nn.Module:
        """The user's model, initialised by its own code under a seed derived from ``seed`` (the global
        torch generator is left as it was)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(rng.derive_seed(seed, 0x0D17) % 2**63)
            module = user_code(f"{self.where}: model constructor", self.spec.model)
        if not isinstance(module, torch.nn.Module):
            raise ValueError(f"Task model must return a torch.nn.Module, got {type(module).__name__}")
        return module

    def _x(self, x: torch.Tensor) -> torch.Tensor:
        """Floating (or boolean) inputs in the parameters' dtype; integer inputs (token ids) as they are."""
        return x.to(self.dtype) if x.is_floating_point() or x.dtype == torch.bool else x

    def _y(self, y: torch.Tensor) -> torch.Tensor:
        """Integer labels as int64 (cross-entropy's class indices), others in the parameters' dtype."""
        return y.long() if self.integer else y.to(self.dtype)

    def check_output(self) -> None:
        """Refuse a model whose output does not fit the labels, or a loss that is not a scalar."""
        x, y = self.data.x_train[:2], self.data.y_train[:2]
        try:
            with torch.no_grad():
                out = self.forward(self.flat(self.module), x, train=False)
        except Exception as exc:  # the user's forward: any failure is a one-line refusal
            raise ValueError(f"Task model fails on training records of shape {list(x.shape[1:])} "
                             f"({described(exc)})") from None
        if not isinstance(out, torch.Tensor) or out.dim() == 0 or len(out) != len(x):
            raise ValueError(f"Task model must return one output row per record, got {_shape(out)} for {len(x)} records")
        classes = int(max(self.data.y_train.max(), self.data.y_test.max())) + 1 if self.integer else 0
        if self.integer and (out.dim() != 2 or out.shape[1] < classes):
            raise ValueError(f"Task model returns {_shape(out)} for {len(x)} records; integer labels up to {classes - 1} "
                             f"need logits [{len(x)}, >= {classes}]")
        if not self.integer and out[0].numel() != y[0].numel():
            raise ValueError(f"Task model returns {_shape(out)} for {len(x)} records but the labels are {_shape(y)}")
        loss = self.loss_of(out, y)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError(f"Task loss must return a scalar tensor, got {_shape(loss)}")
        if not bool(torch.isfinite(loss).all()):
            raise ValueError(f"{self.where}: the loss of the initial model on two training records is {float(loss)}")
        if self.spec.metric is not None:  # probed on two test records, before anything is written
            with torch.no_grad():
                probe = self.forward(self.flat(self.module), self.data.x_test[:2], train=False)
            finite(self.where, {"test_metric": user_code(f"{self.where}: metric", self.spec.metric, probe,
                                                         self.data.y_test[:2])})

    def flat(self, module: torch.nn.Module) -> torch.Tensor:
        """``module``'s parameters as one flat vector (in ``named_parameters`` order)."""
        return torch.cat([p.detach().reshape(-1) for p in module.parameters()]).to(self.dtype)

    def params(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """θ unflattened into the module's named parameters."""
        return {n: t.view(s) for n, t, s in zip(self.names, theta.split(self.numels), self.shapes)}

    def forward(self, theta: torch.Tensor, x: torch.Tensor, train: bool = True) -> torch.Tensor:
        """The model's output on ``x`` with parameters θ, in training or eval mode, on a copy of the buffers."""
        self.module.train(train)
        buffers = {k: b.clone() for k, b in self.buffers.items()}
        return functional_call(self.module, (self.params(theta), buffers), (x,))  # type: ignore[no-any-return]

    def loss_of(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The user's loss, else cross-entropy (integer labels) or mean squared error."""
        if self.spec.loss is not None:
            return user_code(f"{self.where}: loss", self.spec.loss, out, y)  # type: ignore[return-value]
        if self.integer:
            return torch.nn.functional.cross_entropy(out, y)
        return torch.nn.functional.mse_loss(out.reshape(y.shape), y)

    def loss(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss_of(self.forward(theta, x), y)

    def init_params(self, seed: int) -> torch.Tensor:
        """The model's own initialisation under ``seed`` (the same θ for the same seed)."""
        return self.flat(self.build(seed))

    def parameter_slots(self) -> dict[tuple[int, str], tuple[int, int]]:
        """``(id(layer), parameter name) → (offset, size)`` in θ, for every layer's own parameters (a tied
        parameter maps from each layer that holds it)."""
        offsets, off = {}, 0
        for name, n in zip(self.names, self.numels, strict=True):
            offsets[name], off = (off, n), off + n
        where = {id(p): offsets[n] for n, p in self.module.named_parameters()}
        return {(id(m), k): where[id(p)] for m in self.module.modules() for k, p in m.named_parameters(recurse=False)}

    def pick_gradients(self) -> tuple[str, str | None]:
        """``(method, reason)``: ``grouped`` where :func:`~sstq_fl.fl.grouped.grouped_reason` finds no obstacle and
        the grouped gradients match ``vmap``'s on a probe batch, else ``vmap`` (the reason grouping was refused),
        else ``loop`` (why ``vmap`` cannot run)."""
        loop = batch_statistics_layer(self.module)
        if loop is not None:
            return "loop", loop
        theta = self.flat(self.module)
        k = PROBE_CLIENTS * PROBE_RECORDS
        xb = self.data.x_train[:k].reshape(PROBE_CLIENTS, -1, *self.data.x_train.shape[1:])
        yb = self.data.y_train[:k].reshape(PROBE_CLIENTS, -1, *self.data.y_train.shape[1:])
        try:
            ref = EngineTask.client_grads(self, theta, xb, yb)
        except Exception as exc:  # vmap cannot run this model (in-place ops, data-dependent control flow...)
            return "loop", f"vmap failed ({described(exc)[:160]})"
        why = grouped_reason(self.module) or self.grouped_mismatch(theta, xb, yb, ref)
        return ("vmap", why) if why else ("grouped", None)

    def grouped_mismatch(self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, ref: torch.Tensor) -> str | None:
        """Why the grouped gradients cannot stand in for ``ref`` (``vmap``'s on the probe), or ``None``."""
        try:
            got = self.grouped_grads(theta, xb, yb)
        except Exception as exc:  # the model's forward does something the grouped pass cannot follow
            return f"grouped gradients failed ({described(exc)[:160]})"
        scale = float(ref.abs().max()) or 1.0
        err = float((got - ref).abs().max()) / scale
        return None if err <= PROBE_RTOL else f"grouped gradients differ from vmap's by {err:.1e} (relative) on a probe"

    def client_grads(self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor,
                     out: torch.Tensor | None = None) -> torch.Tensor:
        """Per-client gradients ``[clients, d]`` by the task's method (:meth:`pick_gradients`), into ``out`` when given."""
        if self.grad_method == "grouped":
            out = torch.empty(xb.shape[0], self.dim, dtype=self.dtype, device=xb.device) if out is None else out
            step = max(1, GROUPED_RECORDS // max(1, xb.shape[1]))
            for a in range(0, xb.shape[0], step):
                self.grouped_grads(theta, xb[a:a + step], yb[a:a + step], out[a:a + step])
            return out
        if self.grad_method == "vmap":
            return super().client_grads(theta, xb, yb, out)
        return into(out, torch.stack([grad(self.loss)(theta, x, y) for x, y in zip(xb, yb)]))

    def grouped_grads(self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor,
                      out: torch.Tensor | None = None) -> torch.Tensor:
        """Every client's gradient from one forward over all their records and one backward to the layers' outputs
        (:mod:`sstq_fl.fl.grouped`), into ``out`` when given."""
        clients = xb.shape[0]
        seen: list[tuple[torch.nn.Module, torch.Tensor, torch.Tensor]] = []
        hooks = [m.register_forward_hook(lambda mod, inp, res: seen.append((mod, inp[0], res)))
                 for m in self.module.modules() if any(True for _ in m.parameters(recurse=False))]
        try:
            with torch.enable_grad():
                pred = self.forward(theta.detach().requires_grad_(), xb.reshape(-1, *xb.shape[2:]))
                total = per_client_loss(self.loss_of, pred, yb.reshape(-1, *yb.shape[2:]), clients)
                gouts = torch.autograd.grad(total, [o for _, _, o in seen], allow_unused=True)
        finally:
            for h in hooks:
                h.remove()
        flat = torch.zeros(clients, self.dim, dtype=self.dtype, device=xb.device) if out is None else out.zero_()
        for (m, a, _), g in zip(seen, gouts, strict=True):
            if g is not None:
                for k, gk in layer_grads(m, a.detach(), g, clients).items():
                    off, n = self.slots[(id(m), k)]
                    flat[:, off:off + n] += gk.reshape(clients, n)
        return flat

    def evaluate(self, theta: torch.Tensor) -> dict[str, float]:
        """``train_loss`` (a non-private diagnostic) and ``test_accuracy`` / ``test_metric`` / ``test_loss``, in eval mode."""
        d = self.data
        with torch.no_grad():
            out_train, out_test = self.outputs(theta, d.x_train), self.outputs(theta, d.x_test)
            rec = {"train_loss": float(self.loss_of(out_train, d.y_train))}
            if self.spec.metric is not None:
                rec["test_metric"] = float(user_code(f"{self.where}: metric", self.spec.metric, out_test,  # type: ignore[arg-type]
                                                     d.y_test))
            elif self.integer:
                rec["test_accuracy"] = float((out_test.argmax(1) == d.y_test).float().mean())
            else:
                rec["test_loss"] = float(self.loss_of(out_test, d.y_test))
        return finite(self.where, rec)

    def outputs(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The model's eval-mode outputs on all of ``x``, computed :data:`EVAL_CHUNK` records at a time."""
        return torch.cat([self.forward(theta, x[i:i + EVAL_CHUNK], train=False) for i in range(0, len(x), EVAL_CHUNK)])


GRAD_METHODS = {"grouped": "grouped (one forward and backward for all clients)",
                "vmap": "batched over clients (vmap)", "loop": "one client at a time"}


def batch_statistics_layer(module: torch.nn.Module) -> str | None:
    """Why per-client gradients cannot be batched over clients: the first batch-norm-like layer (in
    training mode, where gradients are taken, it normalises with its batch's statistics), as ``"BatchNorm2d at 'bn1' uses batch
    statistics"``; ``None`` if there is none."""
    for name, m in module.named_modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) or "BatchNorm" in type(m).__name__:
            return f"{type(m).__name__} at {name!r} uses batch statistics"
    return None


def finite(where: str, rec: Mapping[str, object]) -> dict[str, float]:
    """``rec`` with every value a finite float; else a one-line ``ValueError`` naming the first that is not
    (raised from evaluation, so a run stops before its next round is charged)."""
    for k, v in rec.items():
        try:
            ok = math.isfinite(float(v))  # type: ignore[arg-type]
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{where}: {k} is {type(v).__name__}, not a number") from None
        if not ok:
            raise ValueError(f"{where}: {k} is {float(v)} (not finite): stopped before the next round "  # type: ignore[arg-type]
                             "is charged")
    return {k: float(v) for k, v in rec.items()}  # type: ignore[arg-type]


def _shape(value: object) -> str:
    """A tensor's shape as ``[2, 10]``, else the value's type."""
    return str(list(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__
