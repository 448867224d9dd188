"""A user's own learning task: a model and its data, for ``sstq-fl run --task FILE.py:NAME`` / ``PKG.MODULE:NAME``.

:class:`Task` is what the user writes; :class:`sstq_fl.fl.module_task.ModuleTask` runs it on the
engines' flat parameter vector.  The data are materialised as tensors here, once, so every engine
(and every Ray actor or cohort node that builds the task again) sees the same records in the same
order; each check is a one-line ``ValueError`` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

Pair = tuple[torch.Tensor, torch.Tensor]


@dataclass
class Task:
    """A model and its data for federated training with an LDP encoder.

    ``model``: a zero-argument callable returning a ``torch.nn.Module`` (called once per seed: its
    own initialisation is the run's initial model).  ``train``, ``test``: ``(x, y)`` tensors or numpy
    arrays, or a ``torch.utils.data.Dataset`` of ``(x, y)`` items (stacked here).  ``loss(output, y)``:
    a scalar, the mean over the batch (default: cross-entropy for integer labels, mean squared error
    otherwise).  ``metric(output, y) -> float`` on the whole test set, reported as ``test_metric``
    (default: accuracy for integer labels, reported as ``test_accuracy``; else the test loss, as
    ``test_loss``).  ``natural_ids``: one client id per training record, for a partitioner that
    splits records by their natural owner (a writer, a device)."""

    model: Callable[[], torch.nn.Module]
    train: Any
    test: Any
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    metric: Callable[[torch.Tensor, torch.Tensor], float] | None = None
    natural_ids: Any = None

    def __post_init__(self) -> None:
        """Materialise the data as tensors and check what can be checked without the model."""
        if not callable(self.model) or isinstance(self.model, torch.nn.Module):
            raise ValueError(f"Task model must be a zero-argument callable returning a torch.nn.Module (e.g. the "
                             f"class), got {type(self.model).__name__}")
        for name in ("loss", "metric"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise ValueError(f"Task {name} must be callable (output, y), got {type(getattr(self, name)).__name__}")
        self.train, self.test = materialise(self.train, "train"), materialise(self.test, "test")
        check_compatible(self.train, self.test)
        if self.natural_ids is not None:
            self.natural_ids = natural_ids_of(self.natural_ids, len(self.train[0]))

    @property
    def integer_labels(self) -> bool:
        """Whether the labels are class indices (cross-entropy and accuracy by default)."""
        return is_integer(self.train[1])


def is_integer(y: torch.Tensor) -> bool:
    """Integer (class-index) labels: neither floating, complex nor boolean."""
    return not (y.is_floating_point() or y.is_complex() or y.dtype == torch.bool)


def materialise(data: Any, split: str) -> Pair:
    """``(x, y)`` tensors of a split given as a pair of tensors / arrays or a ``Dataset`` of pairs."""
    if isinstance(data, torch.utils.data.Dataset):
        data = _stack(data, split)
    if not isinstance(data, tuple | list) or len(data) != 2:
        raise ValueError(f"Task {split} must be (x, y) tensors or arrays or a torch Dataset, got {type(data).__name__}")
    x, y = (_tensor(v, split, part) for v, part in zip(data, ("x", "y")))
    if x.dim() == 0 or y.dim() == 0:
        raise ValueError(f"Task {split}: x and y need a leading record dimension, got shapes {list(x.shape)} and "
                         f"{list(y.shape)}")
    if len(x) != len(y):
        raise ValueError(f"Task {split}: x has {len(x)} records but y has {len(y)}")
    if not len(x):
        raise ValueError(f"Task {split} has no records")
    for part, v in (("x", x), ("y", y)):
        if (v.is_floating_point() or v.is_complex()) and not bool(torch.isfinite(v).all()):
            bad = int((~torch.isfinite(v)).reshape(len(v), -1).any(1).nonzero()[0])
            raise ValueError(f"Task {split} {part} has NaN or infinite values (first at record {bad})")
    return x, y


def _tensor(value: Any, split: str, part: str) -> torch.Tensor:
    """One array as a tensor (numpy arrays without a copy where possible)."""
    try:
        return torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"Task {split} {part} is not a numeric array ({type(value).__name__}: {exc})") from None


def _stack(ds: Any, split: str) -> Pair:
    """A map-style ``Dataset`` of ``(x, y)`` items as two stacked tensors."""
    try:
        items = [ds[i] for i in range(len(ds))]
    except TypeError as exc:
        raise ValueError(f"Task {split}: the Dataset needs __len__ and __getitem__ ({exc})") from None
    if not items or any(not isinstance(it, tuple | list) or len(it) != 2 for it in items):
        raise ValueError(f"Task {split}: the Dataset must hold (x, y) items, got {type(items[0]).__name__ if items else 'none'}")
    try:
        return (torch.stack([torch.as_tensor(np.asarray(it[0])) for it in items]),
                torch.stack([torch.as_tensor(np.asarray(it[1])) for it in items]))
    except RuntimeError as exc:
        raise ValueError(f"Task {split}: the Dataset's items differ in shape ({str(exc).splitlines()[0]})") from None


def check_compatible(train: Pair, test: Pair) -> None:
    """Test records shaped like the training records, and labels of one kind in both."""
    if train[0].shape[1:] != test[0].shape[1:]:
        raise ValueError(f"Task: train x records are {list(train[0].shape[1:])} but test x records are "
                         f"{list(test[0].shape[1:])}")
    if train[1].shape[1:] != test[1].shape[1:] or is_integer(train[1]) != is_integer(test[1]):
        raise ValueError(f"Task: train labels ({train[1].dtype}, {list(train[1].shape[1:])} per record) and test "
                         f"labels ({test[1].dtype}, {list(test[1].shape[1:])}) differ in kind or shape")
    if is_integer(train[1]) and int(min(train[1].min(), test[1].min())) < 0:
        raise ValueError("Task: integer labels are class indices and must be >= 0")


def natural_ids_of(ids: Any, n: int) -> np.ndarray:
    """``natural_ids`` as a 1-D numpy array of one id per training record."""
    out = np.asarray(ids.numpy() if isinstance(ids, torch.Tensor) else ids)
    if out.ndim != 1 or len(out) != n:
        raise ValueError(f"Task natural_ids must hold one client id per training record ({n}), got shape {list(out.shape)}")
    return out
