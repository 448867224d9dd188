"""Your own task for ``sstq-fl run``: a small CNN on a subset of Fashion-MNIST.

``sstq-fl run --task examples/own-task/cnn_task.py:cnn_task --task-params '{"records": 2000}'``
calls ``cnn_task(records=2000)``; the ``sstq_fl.Task`` it returns (a model and its data) is all
sstq-fl needs: the engines train the model's parameters with LDP-encoded client gradients.
"""

import numpy as np
import torch
from torch import nn

import sstq_fl
from sstq_fl.data.idx import load_fashion_mnist


def cnn() -> nn.Module:
    """Conv 1→8, pool, conv 8→16, pool, linear → 10 logits (2,698 parameters)."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4),
        nn.Flatten(), nn.Linear(16 * 3 * 3, 10),
    )


def images(x: np.ndarray) -> torch.Tensor:
    """Flat 784-pixel rows as [N, 1, 28, 28] images."""
    return torch.from_numpy(x).reshape(-1, 1, 28, 28)


def cnn_task(records: int = 2000, test_records: int = 1000, data_dir: str | None = None) -> sstq_fl.Task:
    """The first ``records`` training and ``test_records`` test images of Fashion-MNIST."""
    xtr, ytr, xte, yte = load_fashion_mnist(data_dir)
    return sstq_fl.Task(model=cnn, train=(images(xtr[:records]), ytr[:records]),
                        test=(images(xte[:test_records]), yte[:test_records]))
