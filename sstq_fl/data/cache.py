"""Decoded data sets cached in the user's cache folder, keyed by the digest of their source files.

Decoding a data set (gunzip, parse, convert to float) costs more than a short run's rounds; the
decoded arrays are kept as ``.npy`` files (``allow_pickle=False``) in
``$SSTQ_FL_CACHE/decoded/<name>-<digest>/`` (default ``~/.cache/sstq-fl``).  The digest is the
SHA-256 of the decoder's version and every source file's name and bytes, so a changed source file
or decoder is a new entry and a stale entry is never read.  Each array is written atomically and
the manifest last, so an interrupted write leaves no entry; an entry that fails to load is
decoded again.  An entry is read memory-mapped copy-on-write: the arrays are the page cache's pages
(no copy into fresh memory, which costs more than the read), writable, with writes private to the
process.  ``SSTQ_FL_DATA_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..io import atomic_write_bytes, atomic_write_json

__all__ = ["CACHE_ENV", "cache_root", "cached_arrays", "source_digest"]

CACHE_ENV = "SSTQ_FL_CACHE"
OFF_ENV = "SSTQ_FL_DATA_CACHE"
MANIFEST = "manifest.json"
log = logging.getLogger("sstq_fl.data")


def cache_root() -> Path:
    """``$SSTQ_FL_CACHE``, else ``~/.cache/sstq-fl``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sstq-fl").expanduser()


def source_digest(version: str, sources: Sequence[Path]) -> str:
    """SHA-256 of ``version`` and each source file's name and contents, in order."""
    h = hashlib.sha256(version.encode())
    for path in sources:
        h.update(b"\0" + path.name.encode() + b"\0")
        with open(path, "rb") as fh:
            h.update(hashlib.file_digest(fh, "sha256").digest())
    return h.hexdigest()


def cached_arrays(name: str, version: str, sources: Sequence[Path],
                  decode: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``decode()``'s arrays, from the cache when an entry for these sources exists, else decoded and cached
    (a cache folder that cannot be written is skipped with a note)."""
    if os.environ.get(OFF_ENV, "1") == "0":
        return decode()
    folder = cache_root() / "decoded" / f"{name}-{source_digest(version, sources)[:24]}"
    got = _read(folder)
    if got is not None:
        return got
    arrays = decode()
    try:
        _write(folder, arrays)
    except OSError as exc:
        log.info("decoded %s not cached (%s)", name, exc)
    return arrays


def _read(folder: Path) -> dict[str, np.ndarray] | None:
    """The arrays of a complete entry, or ``None`` (missing, partial or unreadable)."""
    try:
        keys = json.loads((folder / MANIFEST).read_text())["arrays"]
        return {k: np.load(folder / f"{k}.npy", mmap_mode="c", allow_pickle=False) for k in keys}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    for k, a in arrays.items():
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
        atomic_write_bytes(folder / f"{k}.npy", buf.getvalue())
    atomic_write_json(folder / MANIFEST, {"arrays": list(arrays)})
