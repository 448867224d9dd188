"""Tensor helpers every DP generative pipeline uses: seeded model construction and input checks.

Images are 28×28 grayscale, float32 ``[n, 1, 28, 28]``; the pipelines' pixel scale is [0, 1] (StraightDP maps
them to [−1, 1] itself, :func:`sstq_fl.gen.straightdp.flow.to_model_space`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor, nn

IMAGE_SHAPE = (1, 28, 28)
ArrayLike = Tensor | np.ndarray
DeviceLike = str | torch.device
M = TypeVar("M", bound=nn.Module)


def seeded(factory: Callable[[], M], seed: int) -> M:
    """Build a module with a private, seeded CPU RNG (the caller's global RNG state is untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()


def check_images(x: ArrayLike, name: str = "x") -> Tensor:
    """``[n, 1, 28, 28]`` float32 CPU/device tensor from ``[n, 784]``, ``[n, 28, 28]`` or ``[n, 1, 28, 28]`` in [0, 1]."""
    t = torch.as_tensor(x)
    if t.ndim < 2 or t.ndim > 4 or math.prod(t.shape[1:]) != 784:
        raise ValueError(f"{name}: expected images [n, 784], [n, 28, 28] or [n, 1, 28, 28], got {tuple(t.shape)}")
    t = t.reshape(t.shape[0], *IMAGE_SHAPE).to(torch.float32)
    if t.shape[0] == 0:
        return t
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: images contain NaN or infinite values")
    lo, hi = float(t.min()), float(t.max())
    if lo < -1e-6 or hi > 1 + 1e-6:
        raise ValueError(f"{name}: pixels must lie in [0, 1], got range [{lo:.3g}, {hi:.3g}]")
    return t


def check_labels(y: ArrayLike, n: int, num_classes: int, name: str = "labels") -> Tensor:
    """int64 labels ``[n]`` in ``[0, num_classes)``."""
    t = torch.as_tensor(y)
    if t.ndim != 1 or t.shape[0] != n:
        raise ValueError(f"{name}: expected shape [{n}], got {tuple(t.shape)}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name}: must be integers, got {t.dtype}")
    t = t.to(torch.int64)
    if n and (int(t.min()) < 0 or int(t.max()) >= num_classes):
        raise ValueError(f"{name}: values must lie in [0, {num_classes}), got [{int(t.min())}, {int(t.max())}]")
    return t


def check_float(a: ArrayLike, ndim: int, name: str) -> Tensor:
    """A finite float64 tensor with ``ndim`` dimensions."""
    t = torch.as_tensor(a)
    if t.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    t = t.to(torch.float64)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return t
