"""Where the Flower engine simulates a federation and how much of Flower's log it shows.

The command line's ``--ray-address``, ``--client-cpus``, ``--client-gpus`` and ``--verbose`` of the training
commands (``run``, ``compare``, ``demo``, ``sweep``): none of them is part of a run's identity (the same config and
seed give the same numbers wherever Ray runs), so they are not fields of
:class:`~sstq_fl.config.train.RunConfig`.  A :class:`Placement` travels as the Flower backend's keyword arguments
(:meth:`Placement.backend_kwargs`; :func:`sstq_fl.flower.apps.sstq_server.run_flower_many`), and the vectorized
engine ignores it.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Placement:
    """``ray_address``: attach to this Ray cluster (``None``: start one on this machine); ``client_cpus`` /
    ``client_gpus``: what Ray reserves for each simulated node's actor (``None``: the backend's defaults);
    ``quiet_flower``: hide Flower's own INFO logs while the simulation runs (sstq-fl's progress lines say how it
    goes)."""

    ray_address: str | None = None
    client_cpus: float | None = None
    client_gpus: float | None = None
    quiet_flower: bool = False

    def backend_kwargs(self) -> dict[str, Any]:
        """The Flower training backends' keyword arguments."""
        return asdict(self)


def placement_of(args: argparse.Namespace) -> Placement:
    """A command's :class:`Placement`: its ``--ray-address``, ``--client-cpus``, ``--client-gpus`` where it has them,
    Flower's INFO logs hidden unless ``--verbose`` (a command without that flag keeps them)."""
    return Placement(getattr(args, "ray_address", None), getattr(args, "client_cpus", None),
                     getattr(args, "client_gpus", None), quiet_flower=not getattr(args, "verbose", True))
