"""A training run's folder between runs: its checkpoint (read and every field checked before a resume),
the completed run's metrics, and what a resume may do with them."""

from __future__ import annotations

import json
import math
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..config.train import RunConfig
from ..privacy.errors import short_repr
from ..privacy.transcript import read_limited

_FIELD_DEFAULTS = {f.name: f.default for f in fields(RunConfig) if f.default is not MISSING}
"""A config recorded before a field existed ran with that field's default (each new field defaults to
the behaviour before it: one client per node, the old least-squares task, the partitioners' defaults),
except where :func:`recorded_config` says otherwise."""


def recorded_config(recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded config with the fields added since it was written filled in as the run behaved: their
    defaults, except a Dirichlet partition's ``min_partition_size``, 1 before it existed (the old
    partitioner refused a client without records; its draws are the new one's first), so an old run
    is never resumed on a partition redrawn for the new default of 10."""
    before = {"min_partition_size": 1} if recorded.get("partition") == "dirichlet" else {}
    return {**_FIELD_DEFAULTS, **before, **recorded}


def read_checkpoint(out: Path, cfg: RunConfig) -> dict[str, Any]:
    """``out``'s checkpoint, its fields checked (:func:`check_checkpoint`); ``ValueError`` (one line) if there is
    none, it is malformed, or it was made with another config."""
    path = out / "checkpoint.json"
    if not path.is_file():
        refuse_without_checkpoint(out, cfg)
    data = read_limited(path, "checkpoint")
    try:
        ck = json.loads(data)
    except ValueError as exc:  # invalid JSON or UTF-8
        raise ValueError(f"--resume: {path} is not a JSON checkpoint ({getattr(exc, 'msg', type(exc).__name__)})") from None
    except RecursionError:
        raise ValueError(f"--resume: {path} is not a checkpoint (nested past the parser's recursion limit)") from None
    return check_checkpoint(ck, cfg, str(path))


CHECKPOINT_KEYS = {"config", "round", "rounds", "wall_s", "run_id", "theta_file", "transcript"}


def check_checkpoint(ck: Any, cfg: RunConfig, where: str) -> dict[str, Any]:
    """A checkpoint's fields, each of its type: the config (``cfg``'s), ``round`` in ``0..cfg.rounds`` with as many
    round records, ``wall_s``, ``run_id``, ``theta_file`` and the transcript prefix ``{"lines", "sha256"}``
    (``pooled_diagnostics`` too where the run keeps them)."""
    if not isinstance(ck, dict):
        raise ValueError(f"--resume: {where} is not a checkpoint (a JSON {type(ck).__name__}, not an object)")
    if "transcript" not in ck or "joins" in ck:
        raise ValueError(f"--resume: {where} is of an older format (join counts, no transcript prefix): rerun without "
                         f"--resume")
    if "config" in ck and not isinstance(ck["config"], dict):
        raise ValueError(f"--resume: {where}: config must be an object")
    if "config" in ck:
        _same_config(ck["config"], cfg, f"the checkpoint in {Path(where).parent}")
    optional = {"pooled_diagnostics"} if cfg.pooled_diagnostics else set()
    extra, missing = set(ck) - CHECKPOINT_KEYS - optional, CHECKPOINT_KEYS - set(ck)
    if extra or missing:
        raise ValueError(f"--resume: {where}: " + (f"unknown field(s) {sorted(extra)}" if extra else
                                                    f"missing field(s) {sorted(missing)}"))
    _check_progress(ck, cfg, where)
    return dict(ck)


def _check_progress(ck: dict[str, Any], cfg: RunConfig, where: str) -> None:
    """``round`` (an integer in ``0..cfg.rounds``), one record per round, ``wall_s``, the ids and the prefix."""
    t, rounds, head = ck["round"], ck["rounds"], ck["transcript"]
    if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= cfg.rounds:
        raise ValueError(f"--resume: {where}: round must be an integer in 0..{cfg.rounds}, got {short_repr(t)}")
    if not (isinstance(rounds, list) and len(rounds) == t and all(isinstance(r, dict) for r in rounds)):
        raise ValueError(f"--resume: {where}: rounds must be a list of {t} round records (one per completed round)")
    w = ck["wall_s"]
    if isinstance(w, bool) or not isinstance(w, int | float) or not (math.isfinite(w) and w >= 0):
        raise ValueError(f"--resume: {where}: wall_s must be a non-negative number, got {short_repr(w)}")
    if not (isinstance(ck["run_id"], str) and ck["run_id"] and isinstance(ck["theta_file"], str)):
        raise ValueError(f"--resume: {where}: run_id and theta_file must be strings")
    if not (isinstance(head, dict) and set(head) == {"lines", "sha256"} and isinstance(head["sha256"], str)
            and isinstance(head["lines"], int) and not isinstance(head["lines"], bool)):
        raise ValueError(f"--resume: {where}: transcript must be {{\"lines\": N, \"sha256\": HEX}}, the prefix it "
                         f"belongs to")
    if not isinstance(ck.get("pooled_diagnostics", []), list):
        raise ValueError(f"--resume: {where}: pooled_diagnostics must be a list")


def _same_config(recorded: dict[str, Any], cfg: RunConfig, what: str) -> None:
    """Refuse to resume when ``recorded`` (fields added since it was written: their defaults) is not ``cfg``."""
    recorded = recorded_config(recorded)
    if recorded != asdict(cfg):
        diff = sorted(k for k in recorded if recorded[k] != asdict(cfg).get(k))
        raise ValueError(f"--resume: {what} was made with a different config ({diff})")


def refuse_without_checkpoint(out: Path, cfg: RunConfig) -> None:
    """Raise why ``out`` cannot be resumed without a checkpoint: a completed run there (whose checkpoint was removed
    on completion) of another config, of this one (nothing left to do), or nothing at all."""
    try:
        recorded = json.loads((out / "metrics.json").read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"--resume: no checkpoint in {out} (nothing to resume; run without --resume)") from None
    _same_config(recorded, cfg, f"the completed run in {out}")
    raise ValueError(f"--resume: the run in {out} is complete (its checkpoint was removed when it completed)")


CHECKPOINT_FILES = ("checkpoint.json", "checkpoint_theta.npy")


def remove_checkpoints(out: Path) -> None:
    """Remove a completed run's checkpoint (``checkpoint.json`` first, then its model files): the
    metrics and the transcript are the run's result; the checkpoint only served to resume it."""
    for name in CHECKPOINT_FILES:
        (out / name).unlink(missing_ok=True)
    for f in out.glob("checkpoint_theta-*.npy"):
        f.unlink(missing_ok=True)


def completed_metrics(out: Path, cfg: RunConfig) -> dict[str, Any] | None:
    """``out``'s ``metrics.json`` when it records a completed run of exactly ``cfg`` (else None)."""
    try:
        m = json.loads((out / "metrics.json").read_text())
        done = recorded_config(m["config"]) == asdict(cfg) and len(m["rounds"]) >= cfg.rounds
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return dict(m) if done else None


def finished_run(out: Path, cfg: RunConfig, resume: bool) -> dict[str, Any] | None:
    """With ``resume`` and no checkpoint in ``out``: the metrics of the completed run of ``cfg`` there (its
    checkpoint was removed on completion: nothing to train); a completed run of another config there is
    refused (never trained over).  None otherwise: train (or resume from the checkpoint)."""
    if not resume or (out / "checkpoint.json").exists() or not (out / "metrics.json").exists():
        return None
    done = completed_metrics(out, cfg)
    if done is None:
        refuse_without_checkpoint(out, cfg)
    return done


def read_theta(out: Path, name: str, want: np.ndarray) -> np.ndarray:
    """The checkpoint's model file ``name`` in ``out``: refused (one line) unless it is a finite array of ``want``'s
    shape and dtype with nothing after it."""
    if Path(name).name != name or not name.startswith("checkpoint_theta"):
        raise ValueError(f"--resume: {out}/checkpoint.json names an invalid model file {short_repr(name)}")
    try:
        arr = np.load(out / name, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"--resume: cannot read the model file {out / name} ({type(exc).__name__})") from None
    if not isinstance(arr, np.ndarray) or arr.shape != want.shape or arr.dtype != want.dtype:
        got = f"{arr.dtype} {arr.shape}" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise ValueError(f"--resume: the model file {out / name} holds {got}, not θ ({want.dtype} {want.shape})")
    if not np.isfinite(arr).all():
        raise ValueError(f"--resume: the model file {out / name} holds non-finite values")
    if (out / name).stat().st_size != npy_header_bytes(out / name) + arr.nbytes:
        raise ValueError(f"--resume: the model file {out / name} has bytes after its array (not a file this run wrote)")
    return arr


def npy_header_bytes(path: Path) -> int:
    """The bytes before the data of the ``.npy`` file ``path`` (magic, version and header)."""
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        read(f)
        return f.tell()


@contextmanager
def sigint_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block ends, then raise ``KeyboardInterrupt``: a checkpoint is
    never half-written.  Only where Python's default handler is installed, in the main thread."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt
