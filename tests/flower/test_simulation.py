"""The Flower plumbing both stacks share: one round timeout (the run-config key), the simulation's Ray sizing from
explicit arguments (the command line's :class:`~sstq_fl.placement.Placement`)."""

import pytest

pytest.importorskip("flwr")

from sstq_fl.config.flower import ROUND_TIMEOUT_S, WORKLOAD_TIMEOUT_S, round_timeout  # noqa: E402
from sstq_fl.flower.simulation import backend_config  # noqa: E402


def test_the_round_timeout_is_the_run_configs_else_the_stacks_default(monkeypatch):
    monkeypatch.setenv("SSTQ_FL_ROUND_TIMEOUT", "45")  # no longer read: the run config is the one way
    assert round_timeout() == ROUND_TIMEOUT_S == 600 and round_timeout({}, WORKLOAD_TIMEOUT_S) == 1800
    assert round_timeout({"round-timeout": 0.0}) == 600 and round_timeout(None, WORKLOAD_TIMEOUT_S) == 1800  # unset
    assert round_timeout({"round-timeout": 12.5}, WORKLOAD_TIMEOUT_S) == 12.5


def test_client_resources_come_from_the_command_line_then_the_defaults(monkeypatch, tmp_path):
    """``sstq-fl run --client-cpus/--client-gpus/--ray-address`` reach the Ray actors' resources as arguments; a
    cohort node defaults to a whole CPU, a one-client node to half of one; no CUDA here, so no GPU share by
    default; the environment plays no part."""
    from sstq_fl.cli import build_parser
    from sstq_fl.flower.apps.sstq_server import _simulated_nodes
    from sstq_fl.placement import Placement, placement_of

    for env in ("SSTQ_FL_CLIENT_CPUS", "SSTQ_FL_CLIENT_GPUS", "SSTQ_FL_RAY_ADDRESS"):
        monkeypatch.setenv(env, "7")
    argv = ["run", "--task", "lsq", "--clients", "40", "--clients-per-node", "10", "--out", str(tmp_path)]
    from sstq_fl.cli import _run_config

    cfg = _run_config(build_parser().parse_args(argv), "sqkr")
    job = [(cfg, tmp_path, False)]
    default = placement_of(build_parser().parse_args(argv))
    assert default == Placement(quiet_flower=True)  # a training command hides Flower's INFO logs unless --verbose
    assert _simulated_nodes(job, default.client_cpus) == (4, 1.0) and _simulated_nodes(job, 3.0) == (4, 3.0)
    assert backend_config(1.0, None, None) == {"init_args": backend_config(1.0, None, None)["init_args"],
                                              "client_resources": {"num_cpus": 1.0, "num_gpus": 0.0}}
    assert "address" not in backend_config(1.0, None, None)["init_args"]
    given = placement_of(build_parser().parse_args([*argv, "--client-cpus", "2", "--client-gpus", "0.5", "--verbose"]))
    assert given == Placement(None, 2.0, 0.5, quiet_flower=False)
    assert _simulated_nodes(job, given.client_cpus) == (4, 2.0)
    assert backend_config(2.0, None, given.client_gpus)["client_resources"] == {"num_cpus": 2.0, "num_gpus": 0.5}
    assert backend_config(2.0, "10.0.0.1:6379", 1.0)["init_args"] == {"address": "10.0.0.1:6379"}
