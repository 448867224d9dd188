"""Atomic result files and run metadata."""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from . import __version__


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file ``.NAME.tmp-<pid>-<random>`` in the same
    folder (:func:`clean_temps` removes one a killed writer left), fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-[A-Za-z0-9_]+$")
"""The name of an :func:`atomic_write_bytes` temporary file."""


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def clean_temps(folder: str | os.PathLike[str], everything: bool = False) -> list[Path]:
    """Remove the temporary files of :func:`atomic_write_bytes` under ``folder`` (recursively) whose
    writer is no longer alive, or all of them with ``everything`` (a resumed run owns its folder);
    return those removed.  Other files are never touched."""
    removed: list[Path] = []
    root = Path(folder)
    if not root.is_dir():
        return removed
    for dirpath, _, names in os.walk(root):
        for name in names:
            m = TEMP_NAME.match(name)
            if m and (everything or not _alive(int(m.group("pid")))):
                p = Path(dirpath) / name
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed


REDACTED = "<redacted>"
_CREDENTIAL_OPTION = re.compile(r"^--(auth|.*(token|key|password|passwd|secret|credential))", re.IGNORECASE)


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook``: an object that names a key twice is refused (the last would win)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k[:40]!r}")
        out[k] = v
    return out


def finite_json(obj: Any) -> Any:
    """A copy of ``obj`` in which every non-finite float (inf, -inf, NaN) is None, recursively through dicts,
    lists and tuples, so that it serialises as standard JSON (``null``; a null ε means ε = ∞, see README)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    return obj


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` atomically as strict, standard JSON: non-finite floats become ``null`` (see
    :func:`finite_json`), so any JSON parser reads the file."""
    text = json.dumps(finite_json(obj), indent=2, sort_keys=False, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode())


def scrub_argv(argv: list[str]) -> list[str]:
    """``argv`` with the values of credential-like options (``--token``, ``--auth*``, ``--*key*``,
    ``--*password*``, ``--*secret*``, ``--*credential*``; ``--opt value`` and ``--opt=value``) replaced by
    ``<redacted>``.  A following argument that is itself a long option is kept (the option was a flag)."""
    out = list(argv)
    for i, arg in enumerate(argv):
        name, eq, _ = arg.partition("=")
        if not _CREDENTIAL_OPTION.match(name):
            continue
        if eq:
            out[i] = f"{name}={REDACTED}"
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[i + 1] = REDACTED
    return out


PLUGIN_GROUPS = ("sstq_fl.encoders", "sstq_fl.tasks", "sstq_fl.pipelines", "sstq_fl.backends")
"""The entry-point groups through which other distributions extend sstq-fl."""


@functools.cache
def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def plugin_versions() -> dict[str, str]:
    """``{distribution: version}`` of every installed distribution (sstq-fl aside) that extends sstq-fl
    through an entry point of :data:`PLUGIN_GROUPS` (read once per process: every metrics write asks)."""
    return dict(_plugin_versions())


@functools.lru_cache(maxsize=1)
def _plugin_versions() -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for group in PLUGIN_GROUPS:
        for ep in metadata.entry_points(group=group):
            dist = getattr(ep, "dist", None)
            if dist is not None and dist.metadata["Name"] not in ("sstq-fl", "sstq_fl"):
                out[dist.metadata["Name"]] = dist.version
    return tuple(sorted(out.items()))


def library_versions(torch_version: str, numpy_version: str) -> dict[str, Any]:
    """The versions a result depends on: Python, sstq-fl, Flower, Ray, torch, numpy, dp-accounting
    (``None`` where one is not installed) and the extending plug-ins."""
    return {"python": platform.python_version(), "sstq_fl": __version__, "flwr": _installed("flwr"),
            "ray": _installed("ray"), "torch": torch_version, "numpy": numpy_version,
            "dp_accounting": _installed("dp-accounting"), "plugins": plugin_versions()}


def run_meta() -> dict[str, Any]:
    """What produced a result: command line (credentials redacted), machine, library versions, time."""
    import numpy
    import torch

    argv = scrub_argv(sys.argv)
    return {
        "command": " ".join(["sstq-fl", *argv[1:]]) if argv and argv[0].endswith("sstq-fl") else " ".join(argv),
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads()},
        "versions": library_versions(torch.__version__, numpy.__version__),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def clear_out(files: list[Path], out: Path, force: bool, hint: str = "--resume continues it, --force starts over") -> None:
    """Refuse to write over another run's ``files`` in ``out`` (one line ending in ``hint``) unless
    ``force``, which removes them first: a folder never mixes two runs."""
    if files and not force:
        names = ", ".join(sorted({str(f.relative_to(out)) for f in files})[:4])
        raise ValueError(f"{out} already holds a run's files ({names}{', ...' if len(files) > 4 else ''}): {hint}")
    for f in files:
        f.unlink()


KIND_FILE = ".sstq-fl-kind"
"""The marker a results folder's command writes once it has claimed the folder: ``{"kind": KIND}``."""
KINDS = {"run": "a training run (sstq-fl run)", "comparison": "a comparison (sstq-fl compare)",
         "sweep": "a sweep (sstq-fl sweep)", "generation": "a generative run (sstq-fl gen)"}
_RUN_MARKS = ("metrics.json", "checkpoint.json", "checkpoint_theta.npy", "transcript.jsonl", "curves.png")


def folder_kind(out: Path) -> str | None:
    """What kind of results folder ``out`` is (a key of :data:`KINDS`): its marker, else what its files show
    (a folder written before markers); None when it holds no results."""
    try:
        kind = json.loads((out / KIND_FILE).read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind in KINDS:
        return str(kind)
    if (out / "sweep.json").exists() or (out / "cells").is_dir():
        return "sweep"
    if (out / "comparison.json").exists():
        return "comparison"
    if (out / "samples.png").exists() and (out / "metrics.json").exists():
        return "generation"
    return "run" if any((out / n).exists() for n in _RUN_MARKS) else None


def refuse_other_kind(out: Path, kind: str, also: tuple[str, ...] = ()) -> None:
    """Refuse (one line naming what it holds) an ``--out`` that is a file or another kind of results folder than
    ``kind`` (or one of ``also``): a folder never mixes a run's files with a comparison's or a sweep's (``--force``
    included)."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} exists and is not a folder")
    found = folder_kind(out) if out.is_dir() else None
    if found is not None and found != kind and found not in also:
        raise ValueError(f"--out {out} holds {KINDS[found]}, not {KINDS[kind]}: choose another folder")


def mark_kind(out: Path, kind: str) -> None:
    """Record in ``out`` (created if need be) that it is a ``kind`` results folder; once every check has passed."""
    if not (out / KIND_FILE).is_file():
        atomic_write_json(out / KIND_FILE, {"kind": kind})
