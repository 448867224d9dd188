"""IDX files (the MNIST / Fashion-MNIST format) and the Fashion-MNIST loader.

IDX: a big-endian header ``0x00 0x00 <type> <ndim>`` followed by ``ndim`` uint32 sizes and
the row-major data; ``type 0x08`` is unsigned bytes.  Files may be gzip-compressed.
"""

from __future__ import annotations

import gzip
import os
import struct
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .cache import cached_arrays

FMNIST_FILES = {
    "train_images": "train-images-idx3-ubyte.gz", "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz",
}
FMNIST_ENV = "SSTQ_FL_FMNIST"
FMNIST_SEARCH = ["/usr/share/datasets/fashion-mnist", "~/.cache/sstq-fl/fashion-mnist"]
FMNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_TYPES: dict[int, Any] = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Parse an IDX file (optionally gzipped), validating the header against the payload size."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gunzip(raw, path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic)")
    dtype, ndim = raw[2], raw[3]
    if dtype not in _TYPES:
        raise ValueError(f"{path}: unknown IDX data type {dtype:#x}")
    if len(raw) < 4 + 4 * ndim:
        raise ValueError(f"{path}: truncated IDX header")
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    dt = np.dtype(_TYPES[dtype])
    want = int(np.prod(shape)) * dt.itemsize
    body = raw[4 + 4 * ndim :]
    if len(body) != want:
        raise ValueError(f"{path}: IDX payload has {len(body)} bytes, header {shape} needs {want}")
    return np.frombuffer(body, dtype=dt).reshape(shape)


def gunzip(raw: bytes, path: str | os.PathLike[str]) -> bytes:
    """Decompress gzip bytes read from ``path``; a truncated or corrupt stream is a one-line ValueError."""
    try:
        return gzip.decompress(raw)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ValueError(f"{path}: truncated or corrupt gzip file ({exc}); download it again") from exc


def write_idx(path: str | os.PathLike[str], arr: np.ndarray) -> None:
    """Write an unsigned-byte IDX file (gzipped when the name ends in .gz); used for tests."""
    a = np.ascontiguousarray(arr, dtype=np.uint8)
    data = bytes([0, 0, 0x08, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape) + a.tobytes()
    Path(path).write_bytes(gzip.compress(data) if str(path).endswith(".gz") else data)


def _missing(p: Path) -> list[str]:
    """The Fashion-MNIST file names that are not regular files in ``p`` (empty when ``p`` holds all
    four; a folder that does not exist misses them all)."""
    names = FMNIST_FILES.values()
    return [f for f in names if not (p / f).is_file()]


def _explicit_folder(given: str, what: str) -> Path:
    """``given`` (a ``--data-dir``, or ``what`` = ``$SSTQ_FL_FMNIST=``) when it holds all four files, else an
    error naming it."""
    p = Path(given).expanduser()
    missing = _missing(p)
    if missing:
        why = "no such folder" if not p.exists() else f"missing {', '.join(missing)}"
        raise FileNotFoundError(f"Fashion-MNIST not found in {what}{given} ({why}): it needs all four files "
                                f"{', '.join(FMNIST_FILES.values())}")
    return p


def _download(cache: Path) -> Path:
    """Fetch the missing files from the official source into ``cache`` (each atomically)."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for f in _missing(cache):
            urllib.request.urlretrieve(FMNIST_URL + f, cache / (f + ".part"))
            os.replace(cache / (f + ".part"), cache / f)
        return cache
    except OSError as exc:
        raise FileNotFoundError("Fashion-MNIST not found (install the Debian package dataset-fashion-mnist, "
                                f"set {FMNIST_ENV}, or allow the download): {exc}") from exc


def find_fashion_mnist(root: str | None = None, download: bool = True) -> Path:
    """The folder holding the four Fashion-MNIST files: ``root`` (``--data-dir``), else ``$SSTQ_FL_FMNIST``
    (either one, when given, must hold the files: there is no fall-back), else the Debian package's
    ``/usr/share/datasets/fashion-mnist`` or a cache (downloaded from the official source when allowed)."""
    if root:
        return _explicit_folder(root, "")
    if os.environ.get(FMNIST_ENV):
        return _explicit_folder(os.environ[FMNIST_ENV], f"${FMNIST_ENV}=")
    for c in FMNIST_SEARCH:
        if not _missing(Path(c).expanduser()):
            return Path(c).expanduser()
    if download:
        return _download(Path(FMNIST_SEARCH[-1]).expanduser())
    raise FileNotFoundError(f"Fashion-MNIST not found: apt-get install dataset-fashion-mnist, or set {FMNIST_ENV}")


def check_labels(labels: np.ndarray, path: str | os.PathLike[str], classes: int = 10) -> None:
    """Refuse (one line naming ``path``) labels outside ``0..classes-1``."""
    bad = (labels < 0) | (labels >= classes)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{path}: label {int(labels[i])} at record {i} is outside 0..{classes - 1}")


def load_fashion_mnist(root: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train [60000, 784] float32 in [0, 1], y_train, x_test, y_test)``, decoded once per set of source
    files and then read from the user's cache (:mod:`sstq_fl.data.cache`)."""
    p = find_fashion_mnist(root)
    got = cached_arrays("fashion-mnist", "idx-float32-v1", [p / f for f in FMNIST_FILES.values()],
                        lambda: dict(zip(SPLITS, decode_fashion_mnist(p), strict=True)))
    return got["x_train"], got["y_train"], got["x_test"], got["y_test"]


SPLITS = ("x_train", "y_train", "x_test", "y_test")


def decode_fashion_mnist(p: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four Fashion-MNIST arrays decoded from the IDX files in ``p`` (checked: lengths and labels)."""
    xs = {k: read_idx(p / f) for k, f in FMNIST_FILES.items()}
    for split in ("train", "test"):
        if xs[f"{split}_images"].shape[0] != xs[f"{split}_labels"].shape[0]:
            raise ValueError(f"Fashion-MNIST {split} images and labels disagree in length")
        check_labels(xs[f"{split}_labels"], p / FMNIST_FILES[f"{split}_labels"])
    def flat(a: np.ndarray) -> np.ndarray:
        return (a.reshape(a.shape[0], -1).astype(np.float32) / 255.0)
    return (flat(xs["train_images"]), xs["train_labels"].astype(np.int64), flat(xs["test_images"]),
            xs["test_labels"].astype(np.int64))
