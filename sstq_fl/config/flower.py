"""The Flower run config (``[tool.flwr.app.config]`` and ``flwr run -c key=value``) → sstq-fl configs.

Keys are the config fields with hyphens (:func:`sstq_fl.config.declare.run_config_keys`).  ``workload`` picks what
the app runs: ``train`` (the LDP training run, :class:`sstq_fl.config.train.RunConfig`) or the name of a DP
generative pipeline (:attr:`~sstq_fl.config.generative.PipelineConfig.WORKLOAD`: ``dp-mepf``, ``dp-vqg``,
``straightdp`` or a plug-in's), every one of whose keys carries its prefix (``mepf-``, ``vqg-``, ``sdp-``).
``round-timeout`` (seconds, :func:`round_timeout`: the one place a round's timeout is set) and ``out-dir`` /
``resume`` belong to the app; ``log-to``
(:class:`sstq_fl.config.tracking.TrackingConfig`) to training's experiment tracker.  TOML has no null: each optional
field declares the marker that means unset (``0``, ``""``, ``-1``).

The reader knows the configs, not the registries: the Flower apps pass the registered workloads' names and
prefixes (:mod:`sstq_fl.gen.pipelines`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .catalog import APP_KEYS
from .declare import from_run_config, run_config_keys
from .generative import PipelineConfig
from .tracking import TrackingConfig
from .train import RunConfig

ROUND_TIMEOUT_S = 600.0
"""A training round's timeout where the run config sets none."""
WORKLOAD_TIMEOUT_S = 1800.0
"""A DP workload's round timeout where the run config sets none (one client task covers all of a client's records)."""
EVERY_RECORD = -1
"""A DP workload's ``<prefix>records`` marker for "every private record" (``0`` is unset: the profile's size)."""


def workload_of(rc: dict[str, Any], known: Sequence[str]) -> str:
    """The run config's workload (default ``train``); ``ValueError`` for one not in ``known``."""
    w = str(rc.get("workload", "train"))
    if w not in known:
        raise ValueError(f"unknown workload {w!r} in the Flower run config (known: {', '.join(known)})")
    return w


def round_timeout(rc: Mapping[str, Any] | None = None, default: float = ROUND_TIMEOUT_S) -> float:
    """Seconds a round waits for replies: the run config's ``round-timeout`` where set (> 0), else ``default``
    (:data:`ROUND_TIMEOUT_S` for a training round, :data:`WORKLOAD_TIMEOUT_S` for a DP workload's).  A client
    that has not answered by then is left out of the round."""
    value = float((rc or {}).get("round-timeout", 0) or 0)
    return value if value > 0 else default


def out_dir(rc: dict[str, Any]) -> Path:
    """``out-dir``, a relative one taken relative to the ServerApp's working directory."""
    return Path(str(rc.get("out-dir", "results/flwr-run"))).resolve()


def config_from_run_config(rc: dict[str, Any], prefixes: Sequence[str] = ()) -> tuple[RunConfig, Path, bool]:
    """``train``: ``RunConfig`` (its keys: :func:`~sstq_fl.config.declare.run_config_keys`), output directory,
    resume flag.  The DP workloads' keys (those starting with one of ``prefixes``), the tracking key and the app's
    own keys are ignored here; any other unknown key is refused."""
    tracking, known = run_config_keys(TrackingConfig), tuple(prefixes)
    cfg = from_run_config(RunConfig, rc, ignore=lambda key: key in APP_KEYS or key in tracking or key.startswith(known),
                          engine="flower")
    return cfg, out_dir(rc), bool(rc.get("resume", False))


def tracking_from_run_config(rc: dict[str, Any]) -> TrackingConfig:
    """``train``: where the run's published metrics are also logged (``log-to``; ``""``: nowhere)."""
    keys = run_config_keys(TrackingConfig)
    return from_run_config(TrackingConfig, {k: v for k, v in rc.items() if k in keys})  # type: ignore[no-any-return]


def workload_from_run_config(rc: dict[str, Any], cls: type[PipelineConfig]) -> PipelineConfig:
    """A DP generative workload's config: the run config's ``<prefix>*`` keys (``cls.PREFIX``), read by
    :func:`~sstq_fl.config.declare.from_run_config` (each field's unset marker and words); ``<prefix>records = -1``
    means every private record; the engine is ``flower``."""
    records = cls.PREFIX + "records"
    every = rc.get(records) == EVERY_RECORD
    keys = {k: v for k, v in rc.items() if k.startswith(cls.PREFIX) and not (every and k == records)}
    extra: dict[str, Any] = {"records": 0} if every else {}
    return from_run_config(cls, keys, cls.PREFIX, engine="flower", **extra)  # type: ignore[no-any-return]
