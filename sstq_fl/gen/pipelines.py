"""The DP generative pipeline protocol and its registry.

A pipeline is one subpackage of :mod:`sstq_fl.gen` (or a plug-in's package) that registers a
:class:`Pipeline` on import: its config class (a :class:`~sstq_fl.config.generative.PipelineConfig`, whose class
variables declare its name, the ``gen`` sub-command and the Flower ``workload``, its title and its run-config key
prefix), its run function and the lines the command prints about a run.  The same import registers its client tasks
(:data:`sstq_fl.gen.runner.CLIENT_TASKS`) and models (:data:`sstq_fl.gen.dpsgd.MODELS`), so a client process
that looks up a task finds every pipeline's.  A new built-in pipeline is its subpackage plus one line in
:data:`BUILTINS`; a plug-in is an entry point in the ``sstq_fl.pipelines`` group whose object is a
:class:`Pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..config.generative import PipelineConfig
from ..registry import Registry

BUILTINS = ("sstq_fl.gen.mepf", "sstq_fl.gen.vqg", "sstq_fl.gen.straightdp")
"""The built-in pipelines' subpackages, imported on the first look-up of any gen registry."""


class RunFunction(Protocol):
    """``run(cfg, out, force=False) -> metrics``: one run into the folder ``out`` (metrics as written)."""

    def __call__(self, cfg: Any, out: str | Path, force: bool = False) -> dict[str, Any]: ...


@dataclass
class Pipeline:
    """One DP generative pipeline, as the CLI, the Flower app and the clients see it.

    ``config``: its config class (its name, title and run-config prefix are the class's
    :attr:`~sstq_fl.config.generative.PipelineConfig.WORKLOAD`, ``TITLE`` and ``PREFIX``); ``run``: its
    :class:`RunFunction`; ``summary``: the lines ``sstq-fl gen <name>`` prints about a run's metrics; ``help``: the
    sub-command's one-line description."""

    config: type[PipelineConfig]
    run: RunFunction
    summary: Callable[[dict[str, Any]], str]
    help: str

    @property
    def name(self) -> str:
        """E.g. ``"dp-mepf"``: the ``gen`` sub-command and the Flower ``workload``."""
        return self.config.WORKLOAD

    @property
    def prefix(self) -> str:
        """Its run-config keys' prefix, e.g. ``"mepf-"``."""
        return self.config.PREFIX

    @property
    def title(self) -> str:
        """Its name in prose (the options reference)."""
        return self.config.TITLE


PIPELINES: Registry[Pipeline] = Registry("DP generative pipeline", builtins=BUILTINS, group="sstq_fl.pipelines",
                                         accepts=lambda obj: isinstance(obj, Pipeline),
                                         kind="a sstq_fl.gen.pipelines.Pipeline")


def register_pipeline(pipeline: Pipeline) -> Pipeline:
    """Add ``pipeline`` under its name (a taken name, a config without a name or a prefix is refused)."""
    if not (pipeline.name and pipeline.prefix):
        raise ValueError(f"{pipeline.config.__qualname__} declares no WORKLOAD name or run-config PREFIX")
    PIPELINES.register(pipeline.name, pipeline)
    return pipeline


def prefixes() -> tuple[str, ...]:
    """Every registered pipeline's run-config key prefix."""
    return tuple(p.prefix for _, p in PIPELINES.items())


def workloads() -> tuple[str, ...]:
    """The Flower app's workloads: ``train`` and every registered DP generative pipeline."""
    return ("train", *PIPELINES.names())
