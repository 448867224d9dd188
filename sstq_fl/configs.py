"""Every configuration a user sets, in one list: the LDP training run, each DP generative
pipeline and the intervals over seeds of a sweep's tables and figures.  The Flower app's run-config
defaults (``[tool.flwr.app.config]`` in ``pyproject.toml``) and the options reference page
(``docs/options.md``, ``sstq-fl options``) are generated from it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .options import options_markdown, run_config_defaults

APP_KEYS: dict[str, Any] = {"workload": "train", "round-timeout": 0.0, "out-dir": "results/flwr-run", "resume": False,
                           "keep-checkpoints": False}
"""The Flower app's own run-config keys and defaults (``workload``: ``train`` or a pipeline's name)."""
TRAIN_APP_DEFAULTS: dict[str, Any] = {"clients": 10, "rounds": 20, "randomness": "secure"}
"""Where the Flower app's defaults differ from ``sstq-fl run``'s: a 10-SuperNode federation, and
``secure`` randomness (the deployment default)."""


@dataclass(frozen=True)
class Configured:
    """One configuration: a title, its dataclass, its run-config prefix and the keys it shares unprefixed."""

    title: str
    cls: Any
    prefix: str = ""
    shared: tuple[str, ...] = ()
    app_defaults: tuple[tuple[str, Any], ...] = ()


def configurations() -> Iterator[Configured]:
    """The training run, where it is also logged, each registered DP generative pipeline, then the intervals over
    seeds and the process-wide settings (no run-config key)."""
    from .fl.config import RunConfig
    from .gen.pipelines import PIPELINES
    from .intervals import IntervalOptions
    from .process import ProcessOptions
    from .tracking import TrackingConfig

    yield Configured("LDP training (`sstq-fl run`, `compare`; Flower `workload = \"train\"`)", RunConfig,
                     app_defaults=tuple(TRAIN_APP_DEFAULTS.items()))
    yield Configured("Experiment tracking (`sstq-fl run`, `compare`, `sweep`; Flower `workload = \"train\"`)",
                     TrackingConfig)
    for name, p in PIPELINES.items():
        yield Configured(f"{p.title} (`sstq-fl gen {name}`; Flower `workload = \"{name}\"`)", p.config,
                         p.prefix, tuple(p.shared))
    yield Configured("Intervals over seeds (`sstq-fl sweep`, `compare`, `plot`; experiment file `[experiment] interval`)",
                     IntervalOptions)
    yield Configured("Process-wide settings (`sstq-fl` before the sub-command, e.g. `sstq-fl --no-malloc-tuning run`; "
                     "`sstq_fl.process`)", ProcessOptions)


def app_run_config_defaults() -> dict[str, Any]:
    """The Flower app's complete run config with its defaults, as ``pyproject.toml`` must hold it."""
    out = dict(APP_KEYS)
    for c in configurations():
        defaults = run_config_defaults(c.cls, c.prefix, c.shared)
        if c.shared:  # the shared keys are the training run's (one value for every workload)
            defaults = {k: v for k, v in defaults.items() if k.startswith(c.prefix)}
        out.update(defaults)
        out.update(dict(c.app_defaults))
    return out


def options_reference() -> str:
    """The options reference page (markdown), generated from the declarations."""
    app = ", ".join(f"`{k} = {v!r}`" for k, v in TRAIN_APP_DEFAULTS.items())
    head = ["# Options reference", "",
            "Generated from the configuration dataclasses by `sstq-fl options` (do not edit by hand). Each option",
            "is one field: its CLI flag, its key in the Flower run config (`flwr run . -c \"key=value\"`), its type,",
            "default, allowed values and help. TOML has no null: in the run config an unset optional value is",
            "written as its marker (`0`, `\"\"` or `-1`, the one `pyproject.toml` holds). The Flower app's own keys",
            "are " + ", ".join(f"`{k}`" for k in APP_KEYS) + f"; where the app's defaults differ from the CLI's: {app}.",
            "A pipeline's run-config keys carry its prefix; the keys it shares with training are unprefixed.", "", ""]
    return "\n".join(head) + "\n".join(options_markdown(c.cls, c.title, c.prefix, c.shared) for c in configurations())
