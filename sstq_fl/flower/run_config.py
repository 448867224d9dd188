"""The Flower run config (``[tool.flwr.app.config]`` and ``flwr run -c key=value``) → sstq-fl configs.

Keys are the config fields with hyphens.  ``workload`` picks what the app runs: ``train`` (the
LDP training run, :class:`sstq_fl.fl.engine.RunConfig`) or ``dp-mepf`` (the DP generative
workload, :class:`sstq_fl.gen.dp_mepf.MepfConfig`, its own keys prefixed ``mepf-``).
``round-timeout`` (seconds) and ``out-dir`` / ``resume`` belong to the app.  TOML has no null:
``0`` / ``""`` mean unset where a field may be unset.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

WORKLOADS = ("train", "dp-mepf")
APP_KEYS = ("out-dir", "resume", "round-timeout", "workload")
UNSET_IS_NONE = ("records", "generator_steps", "eval_samples", "probe_epochs", "dataset_budget_epsilon")


def workload_of(rc: dict[str, Any]) -> str:
    """The run config's workload (default ``train``); ``ValueError`` for an unknown one."""
    w = str(rc.get("workload", "train"))
    if w not in WORKLOADS:
        raise ValueError(f"unknown workload {w!r} in the Flower run config (known: {', '.join(WORKLOADS)})")
    return w


def out_dir(rc: dict[str, Any]) -> Path:
    """``out-dir``, a relative one taken relative to ``$SSTQ_FL_WORKDIR`` (else the working directory)."""
    out = Path(str(rc.get("out-dir", "results/flwr-run")))
    if not out.is_absolute():
        out = Path(os.environ.get("SSTQ_FL_WORKDIR", ".")) / out
    return out.resolve()


def config_from_run_config(rc: dict[str, Any]) -> tuple[Any, Path, bool]:
    """``train``: ``RunConfig``, output directory, resume flag.  ``mepf-*`` keys are ignored here;
    any other unknown key is refused.  ``randomness`` defaults to ``secure`` (the app config's value)."""
    from ..fl.engine import RunConfig

    known = {f.name for f in fields(RunConfig)}
    kw: dict[str, Any] = {}
    for key, value in rc.items():
        name = key.replace("-", "_")
        if name in known:
            kw[name] = value
        elif key not in APP_KEYS and not key.startswith("mepf-"):
            raise ValueError(f"unknown key {key!r} in the Flower run config (known: {sorted(known)} + {list(APP_KEYS)})")
    kw["budget_epsilon"] = kw.get("budget_epsilon") or None
    kw["data_dir"] = kw.get("data_dir") or None
    kw["engine"] = "flower"
    return RunConfig(**kw), out_dir(rc), bool(rc.get("resume", False))


def mepf_config_from_run_config(rc: dict[str, Any]) -> Any:
    """``dp-mepf``: a ``MepfConfig`` from the ``mepf-*`` keys plus the shared ``clients``, ``epsilon``,
    ``delta``, ``seed``, ``partition``, ``alpha`` and ``randomness``; ``moments`` as ``"1,2"``; ``0`` for
    records, generator steps, evaluation samples, probe epochs and the data-set budget means the
    profile's default (``mepf-records = -1``: every private record); ``""`` cache dir: the default."""
    from ..gen.dp_mepf import MepfConfig

    known = {f.name for f in fields(MepfConfig)}
    shared = ("clients", "epsilon", "delta", "seed", "partition", "alpha", "randomness")
    kw: dict[str, Any] = {k: rc[k] for k in shared if k in rc}
    for key, value in rc.items():
        if key.startswith("mepf-"):
            name = key[5:].replace("-", "_")
            if name not in known:
                raise ValueError(f"unknown key {key!r} in the Flower run config (mepf- keys: {sorted(known)})")
            kw[name] = value
    if isinstance(kw.get("moments"), str):
        kw["moments"] = tuple(int(m) for m in str(kw["moments"]).split(","))
    for opt in UNSET_IS_NONE:  # TOML has no null: 0 means the profile's default
        if opt in kw and not kw[opt]:
            kw[opt] = None
    if kw.get("records") == -1:
        kw["records"] = 0  # MepfConfig: every private record
    if kw.get("cache_dir") == "":
        del kw["cache_dir"]
    kw["engine"] = "flower"
    return MepfConfig(**kw)
