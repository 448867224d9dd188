"""The DP generative pipeline protocol and its registry.

A pipeline is one subpackage of :mod:`sstq_fl.gen` (or a plug-in's package) that registers a
:class:`Pipeline` on import: its name (the ``gen`` sub-command and the Flower ``workload``), its run-config
key prefix, its config class (a :class:`~sstq_fl.gen.config.PipelineConfig`), its run function and the lines
the command prints about a run.  The same import registers its client tasks
(:data:`sstq_fl.gen.runner.CLIENT_TASKS`) and models (:data:`sstq_fl.gen.dpsgd.MODELS`), so a client process
that looks up a task finds every pipeline's.  A new built-in pipeline is its subpackage plus one line in
:data:`BUILTINS`; a plug-in is an entry point in the ``sstq_fl.pipelines`` group whose object is a
:class:`Pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..registry import Registry
from .config import SHARED_KEYS, PipelineConfig

BUILTINS = ("sstq_fl.gen.mepf", "sstq_fl.gen.vqg", "sstq_fl.gen.straightdp")
"""The built-in pipelines' subpackages, imported on the first look-up of any gen registry."""


class RunFunction(Protocol):
    """``run(cfg, out, force=False) -> metrics``: one run into the folder ``out`` (metrics as written)."""

    def __call__(self, cfg: Any, out: str | Path, force: bool = False) -> dict[str, Any]: ...


@dataclass
class Pipeline:
    """One DP generative pipeline, as the CLI, the Flower app and the clients see it.

    ``name``: e.g. ``"dp-mepf"``; ``prefix``: its run-config keys' prefix, e.g. ``"mepf-"``; ``config``: its
    config class; ``run``: its :class:`RunFunction`; ``summary``: the lines ``sstq-fl gen <name>`` prints about
    a run's metrics; ``title``: its name in prose (the options reference); ``shared``: the config fields read from
    unprefixed run-config keys (the training run's; default
    :data:`~sstq_fl.gen.config.SHARED_KEYS`); ``help``: the sub-command's one-line description;
    ``cli_values``: options whose command-line words differ from the config's values, ``{field: {word: value}}``
    (e.g. DP-VQG's ``--reference none`` for ``reference = ""``)."""

    name: str
    prefix: str
    config: type[PipelineConfig]
    run: RunFunction
    summary: Callable[[dict[str, Any]], str]
    title: str
    help: str
    shared: tuple[str, ...] = SHARED_KEYS
    cli_values: dict[str, dict[str, Any]] = field(default_factory=dict)


PIPELINES: Registry[Pipeline] = Registry("DP generative pipeline", builtins=BUILTINS, group="sstq_fl.pipelines",
                                         accepts=lambda obj: isinstance(obj, Pipeline),
                                         kind="a sstq_fl.gen.pipelines.Pipeline")


def register_pipeline(pipeline: Pipeline) -> Pipeline:
    """Add ``pipeline`` under its name (a taken name is refused)."""
    PIPELINES.register(pipeline.name, pipeline)
    return pipeline


def prefixes() -> tuple[str, ...]:
    """Every registered pipeline's run-config key prefix."""
    return tuple(p.prefix for _, p in PIPELINES.items())
