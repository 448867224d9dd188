"""CIFAR-10 "python version" batches from a user-supplied folder, read without executing code.

The official batches (``data_batch_1..5``, ``test_batch``) are pickled dicts holding a
``b'data'`` uint8 array ``[10000, 3072]`` and ``b'labels'``.  They are read with an
unpickler that only admits the handful of numpy reconstruction globals such a file needs;
anything else in the stream is refused, so a hostile file cannot run code.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import first_line
from .cache import cached_arrays

_ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}


class BatchError(pickle.UnpicklingError, ValueError):
    """A CIFAR batch that is truncated, corrupt or asks for a global outside the allowed few."""


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise BatchError(f"refusing to load {module}.{name} from a CIFAR batch")


def _unpickle(path: str | os.PathLike[str]) -> Any:
    """The object pickled in ``path``, through the safe unpickler; a one-line :class:`BatchError` naming the
    file when it is refused, truncated or corrupt."""
    try:
        return _SafeUnpickler(io.BytesIO(Path(path).read_bytes()), encoding="bytes").load()
    except BatchError as exc:
        raise BatchError(f"{path}: {exc}") from exc
    except Exception as exc:  # anything the unpickler trips on in a damaged file (EOF, bad opcodes, sizes, codecs)
        why = first_line(exc) or type(exc).__name__
        raise BatchError(f"{path}: truncated or corrupt CIFAR batch ({why})") from exc


def read_batch(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(data uint8 [n, 3072], labels int64 [n])`` of one official batch, validated."""
    obj = _unpickle(path)
    if not isinstance(obj, dict) or b"data" not in obj or b"labels" not in obj:
        raise ValueError(f"{path}: not a CIFAR-10 python batch (needs b'data' and b'labels')")
    data = np.asarray(obj[b"data"], dtype=np.uint8)
    labels = np.asarray(obj[b"labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != labels.shape[0]:
        raise ValueError(f"{path}: CIFAR batch has data {data.shape} and {labels.shape[0]} labels")
    if labels.min(initial=0) < 0 or labels.max(initial=0) > 9:
        raise ValueError(f"{path}: CIFAR labels outside 0..9")
    return data, labels


def load_cifar10(root: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train [50000, 3072] float32 in [0, 1], y_train, x_test, y_test)`` from ``root``
    (the extracted ``cifar-10-batches-py`` folder)."""
    p = Path(root)
    names = [f"data_batch_{i}" for i in range(1, 6)]
    missing = [n for n in [*names, "test_batch"] if not (p / n).exists()]
    if missing:
        raise FileNotFoundError(f"CIFAR-10 batches {missing} not found in {p} (download cifar-10-python.tar.gz "
                                "from the official site and extract it)")
    files = [p / n for n in [*names, "test_batch"]]
    got = cached_arrays("cifar10", "batches-float32-v1", files, lambda: _decode(files))
    return got["x_train"], got["y_train"], got["x_test"], got["y_test"]


def _decode(files: list[Path]) -> dict[str, np.ndarray]:
    """The five training batches and the test batch (last in ``files``) as float32 arrays in [0, 1]."""
    tr = [read_batch(f) for f in files[:-1]]
    te = read_batch(files[-1])
    x = np.concatenate([t[0] for t in tr]).astype(np.float32) / 255.0
    return {"x_train": x, "y_train": np.concatenate([t[1] for t in tr]), "x_test": te[0].astype(np.float32) / 255.0,
            "y_test": te[1]}


def write_batch(path: str | os.PathLike[str], data: np.ndarray, labels: np.ndarray) -> None:
    """Write a batch in the official format (for tests and tiny fixtures)."""
    obj = {b"batch_label": b"sstq-fl test", b"labels": [int(v) for v in labels], b"data": np.asarray(data, np.uint8),
           b"filenames": [b"x"] * len(labels)}
    Path(path).write_bytes(pickle.dumps(obj, protocol=2))
