"""The Flower run config (``[tool.flwr.app.config]`` and ``flwr run -c key=value``) → sstq-fl configs.

Keys are the config fields with hyphens (:func:`sstq_fl.options.run_config_keys`).  ``workload`` picks what the
app runs: ``train`` (the LDP training run, :class:`sstq_fl.fl.config.RunConfig`) or the name of a registered DP
generative pipeline (:data:`sstq_fl.gen.pipelines.PIPELINES`: ``dp-mepf``, ``dp-vqg``, ``straightdp``), whose own
keys carry its prefix (``mepf-``, ``vqg-``, ``sdp-``).  ``round-timeout`` (seconds, :func:`round_timeout`: the one
place a round's timeout is set) and ``out-dir`` / ``resume`` belong to the app; ``log-to``
(:class:`sstq_fl.tracking.TrackingConfig`) to training's experiment tracker.
TOML has no null: each optional field declares the marker that means unset (``0``, ``""``,
``-1``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROUND_TIMEOUT_S = 600.0
"""A training round's timeout where the run config sets none."""
WORKLOAD_TIMEOUT_S = 1800.0
"""A DP workload's round timeout where the run config sets none (one client task covers all of a client's records)."""
EVERY_RECORD = -1
"""A DP workload's ``<prefix>records`` marker for "every private record" (``0`` is unset: the profile's size)."""


def workloads() -> tuple[str, ...]:
    """``train`` and every registered DP generative pipeline."""
    from ..gen.pipelines import PIPELINES

    return ("train", *PIPELINES.names())


def workload_of(rc: dict[str, Any]) -> str:
    """The run config's workload (default ``train``); ``ValueError`` for an unknown one."""
    w, known = str(rc.get("workload", "train")), workloads()
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


def config_from_run_config(rc: dict[str, Any]) -> tuple[Any, Path, bool]:
    """``train``: ``RunConfig`` (its keys: :func:`sstq_fl.options.run_config_keys`), output directory,
    resume flag.  A DP workload's prefixed keys and the app's own keys are ignored here; any other
    unknown key is refused."""
    from ..configs import APP_KEYS
    from ..fl.config import RunConfig
    from ..gen.pipelines import prefixes as gen_prefixes
    from ..options import from_run_config

    prefixes, tracking = gen_prefixes(), tracking_keys()
    cfg = from_run_config(RunConfig, rc, ignore=lambda key: key in APP_KEYS or key in tracking or key.startswith(prefixes),
                          engine="flower")
    return cfg, out_dir(rc), bool(rc.get("resume", False))


def tracking_keys() -> dict[str, str]:
    """The run-config keys of :class:`~sstq_fl.tracking.TrackingConfig` (``log-to``)."""
    from ..options import run_config_keys
    from ..tracking import TrackingConfig

    return run_config_keys(TrackingConfig)


def tracking_from_run_config(rc: dict[str, Any]) -> Any:
    """``train``: where the run's published metrics are also logged (``log-to``; ``""``: nowhere), checked."""
    from ..options import from_run_config
    from ..tracking import TrackingConfig

    keys = tracking_keys()
    return from_run_config(TrackingConfig, {k: v for k, v in rc.items() if k in keys})


def workload_from_run_config(rc: dict[str, Any]) -> tuple[Any, Callable[..., dict[str, Any]]]:
    """A DP generative workload's config and run function: the run config's ``<prefix>*`` keys plus the shared
    unprefixed ones (:attr:`~sstq_fl.gen.pipelines.Pipeline.shared`), read by :func:`sstq_fl.options.from_run_config`
    (each field's unset marker, ``"1,2"`` strings for tuple fields); ``<prefix>records = -1`` means every private
    record; the engine is ``flower``."""
    from ..gen.pipelines import PIPELINES
    from ..options import from_run_config

    p = PIPELINES[workload_of(rc)]
    every = rc.get(p.prefix + "records") == EVERY_RECORD
    keys = {k: v for k, v in rc.items() if not (every and k == p.prefix + "records")}
    extra: dict[str, Any] = {"records": 0} if every else {}
    return from_run_config(p.config, keys, p.prefix, p.shared, engine="flower", **extra), p.run
