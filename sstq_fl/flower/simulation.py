"""The in-process Flower simulation: :func:`simulate` runs Flower's ``run_simulation`` so that one Ctrl-C stops
it (:mod:`sstq_fl.flower.stopping`), and :func:`backend_config` sizes its Ray backend from explicit arguments
(where Ray runs, what each simulated node's actor holds)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from flwr.serverapp import ServerApp

from ..checks import require
from .logs import flower_logs_hidden, without_run_simulation_deprecation
from .stopping import Interrupted, stop_on_sigint


def simulate(server: ServerApp, client_app: Any, nodes: int, backend_config: dict[str, Any], stop: threading.Event,
             quiet: bool = False) -> None:
    """Flower's ``run_simulation`` with ``nodes`` SuperNodes, where one Ctrl-C sets ``stop`` and so ends the
    simulation within seconds (:func:`~sstq_fl.flower.stopping.stop_on_sigint`; the ServerApp must talk through a
    :class:`~sstq_fl.flower.stopping.StoppableGrid` over ``stop``), and without Flower's deprecation banner for
    ``run_simulation`` (:func:`~sstq_fl.flower.logs.without_run_simulation_deprecation`).  ``quiet``: hide Flower's
    INFO logs meanwhile (:func:`~sstq_fl.flower.logs.flower_logs_hidden`; the command line's training commands
    do, unless ``--verbose``).  The caller tells an interrupted simulation by ``stop``.  Without Ray (the
    ``simulation`` extra) a one-line ``ValueError``."""
    require("ray", "Flower's simulation engine (--engine flower; --engine vectorized runs without it)")
    from flwr.simulation import run_simulation

    with stop_on_sigint(stop), without_run_simulation_deprecation(), flower_logs_hidden(quiet):
        try:
            run_simulation(server_app=server, client_app=client_app, num_supernodes=nodes, backend_config=backend_config)
        except Interrupted:
            pass


def client_resource(value: float | None, default: Callable[[], float]) -> float:
    """A Ray resource per node's actor: ``value`` where given (``sstq-fl run --client-cpus`` / ``--client-gpus``),
    else ``default()``."""
    return float(value) if value is not None else default()


def cuda_share() -> float:
    """0.25 GPU per actor where CUDA is available (four nodes share one GPU), else 0."""
    import torch

    return 0.25 if torch.cuda.is_available() else 0.0


def backend_config(client_cpus: float, ray_address: str | None, client_gpus: float | None) -> dict[str, Any]:
    """Flower's simulation backend config: Ray started locally on every core (or attached at ``ray_address``),
    ``client_cpus`` and ``client_gpus`` per node's actor (GPUs: else 0.25 where CUDA is available, else 0)."""
    init_args: dict[str, Any] = {"address": ray_address} if ray_address else {"num_cpus": os.cpu_count() or 2}
    return {"init_args": init_args,
            "client_resources": {"num_cpus": client_cpus, "num_gpus": client_resource(client_gpus, cuda_share)}}
