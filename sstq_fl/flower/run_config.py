"""The Flower run config (``[tool.flwr.app.config]`` and ``flwr run -c key=value``) → sstq-fl configs.

Keys are the config fields with hyphens.  ``workload`` picks what the app runs: ``train`` (the
LDP training run, :class:`sstq_fl.fl.engine.RunConfig`) or ``dp-mepf`` (the DP generative
workload, :class:`sstq_fl.gen.dp_mepf.MepfConfig`, its own keys prefixed ``mepf-``) or ``dp-vqg``
(:class:`sstq_fl.gen.dp_vqg.VqgConfig`, keys prefixed ``vqg-``).
``round-timeout`` (seconds) and ``out-dir`` / ``resume`` belong to the app.  TOML has no null:
``0`` / ``""`` mean unset where a field may be unset.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

WORKLOADS = ("train", "dp-mepf", "dp-vqg", "straightdp")
# a DP generative workload: (module, config class, run function, run-config key prefix)
GEN_WORKLOADS = {"dp-mepf": ("sstq_fl.gen.dp_mepf", "MepfConfig", "run_dp_mepf", "mepf-"),
                 "dp-vqg": ("sstq_fl.gen.dp_vqg", "VqgConfig", "run_dp_vqg", "vqg-"),
                 "straightdp": ("sstq_fl.gen.straightdp.pipeline", "StraightConfig", "run_straightdp", "sdp-")}
APP_KEYS = ("out-dir", "resume", "round-timeout", "workload")
UNSET_IS_NONE = ("records", "generator_steps", "eval_samples", "probe_epochs", "dataset_budget_epsilon", "steps", "batch",
                 "prior_epochs", "prior_lr", "public_records", "pretrain_steps", "distill_steps", "sgd_steps",
                 "multiplicity", "q", "tau", "t0")
NEGATIVE_IS_NONE = ("beta",)  # 0 is a value here (uniform THA clipping); -1 marks "unset"
SHARED_KEYS = ("clients", "epsilon", "delta", "seed", "partition", "alpha", "randomness")


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
    """``train``: ``RunConfig`` (its keys: :func:`sstq_fl.options.run_config_keys`), output directory,
    resume flag.  A DP workload's prefixed keys and the app's own keys are ignored here; any other
    unknown key is refused."""
    from ..fl.config import RunConfig
    from ..options import from_run_config

    prefixes = tuple(w[3] for w in GEN_WORKLOADS.values())
    cfg = from_run_config(RunConfig, rc, ignore=lambda key: key in APP_KEYS or key.startswith(prefixes), engine="flower")
    return cfg, out_dir(rc), bool(rc.get("resume", False))


def workload_from_run_config(rc: dict[str, Any]) -> tuple[Any, Callable[..., dict[str, Any]]]:
    """A DP generative workload's config and run function: the run config's ``<prefix>*`` keys (see
    :data:`GEN_WORKLOADS`) plus the shared :data:`SHARED_KEYS`; ``"1,2"`` strings for tuple fields;
    ``0`` for the counts in :data:`UNSET_IS_NONE` means the profile's default (``records = -1``: every
    private record); an empty ``cache-dir``: the default."""
    module, cls_name, run_name, prefix = GEN_WORKLOADS[workload_of(rc)]
    mod = importlib.import_module(module)
    cls = getattr(mod, cls_name)
    known = {f.name: f for f in fields(cls)}
    kw: dict[str, Any] = {k: rc[k] for k in SHARED_KEYS if k in rc and k in known}
    for key, value in rc.items():
        if key.startswith(prefix):
            name = key[len(prefix):].replace("-", "_")
            if name not in known:
                raise ValueError(f"unknown key {key!r} in the Flower run config ({prefix} keys: {sorted(known)})")
            kw[name] = value
    return cls(**_unset_defaults(kw, known), engine="flower"), getattr(mod, run_name)


def _unset_defaults(kw: dict[str, Any], known: dict[str, Any]) -> dict[str, Any]:
    """TOML has no null: map the run config's unset markers (``0`` counts, ``""`` cache dir, ``-1`` records)
    and ``"1,2"`` tuple strings onto the config's own values."""
    for name, value in list(kw.items()):
        if isinstance(value, str) and "tuple" in str(known[name].type):
            kw[name] = tuple(int(m) for m in value.split(","))
        elif (name in UNSET_IS_NONE and not value) or (name in NEGATIVE_IS_NONE and value < 0):
            kw[name] = None
        elif name == "cache_dir" and value == "":
            del kw[name]
    if kw.get("records") == -1:
        kw["records"] = 0  # every private record
    kw.pop("engine", None)
    return kw
