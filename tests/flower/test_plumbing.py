"""The Flower plumbing both stacks share: the round timeout is one helper, a run-config key first."""

from sstq_fl.flower.plumbing import ROUND_TIMEOUT_S, WORKLOAD_TIMEOUT_S, backend_config, round_timeout


def test_the_round_timeout_is_the_run_configs_then_the_environments_then_the_stacks_default(monkeypatch):
    monkeypatch.delenv("SSTQ_FL_ROUND_TIMEOUT", raising=False)
    assert round_timeout() == ROUND_TIMEOUT_S == 600 and round_timeout({}, WORKLOAD_TIMEOUT_S) == 1800
    assert round_timeout({"round-timeout": 0.0}) == 600  # TOML's unset
    monkeypatch.setenv("SSTQ_FL_ROUND_TIMEOUT", "45")
    assert round_timeout({"round-timeout": 0}) == 45 and round_timeout(None, WORKLOAD_TIMEOUT_S) == 45
    assert round_timeout({"round-timeout": 12.5}, WORKLOAD_TIMEOUT_S) == 12.5


def test_client_resources_come_from_the_call_then_the_cli_then_the_defaults(monkeypatch, tmp_path):
    """``sstq-fl run --client-cpus/--client-gpus`` reach the Ray actors' resources; a cohort node defaults to a
    whole CPU, a one-client node to half of one; no CUDA here, so no GPU share by default."""
    from sstq_fl.cli import _run_config, build_parser
    from sstq_fl.flower.apps.sstq_server import _simulated_nodes

    for env in ("SSTQ_FL_CLIENT_CPUS", "SSTQ_FL_CLIENT_GPUS", "SSTQ_FL_RAY_ADDRESS"):
        monkeypatch.setenv(env, "")  # restored afterwards; empty counts as unset
    argv = ["run", "--task", "lsq", "--clients", "40", "--clients-per-node", "10", "--out", str(tmp_path)]
    cfg = _run_config(build_parser().parse_args(argv), "sqkr")
    job = [(cfg, tmp_path, False)]
    assert _simulated_nodes(job, None) == (4, 1.0) and _simulated_nodes(job, 3.0) == (4, 3.0)
    assert backend_config(1.0, None, None)["client_resources"] == {"num_cpus": 1.0, "num_gpus": 0.0}
    _run_config(build_parser().parse_args([*argv, "--client-cpus", "2", "--client-gpus", "0.5"]), "sqkr")
    assert _simulated_nodes(job, None) == (4, 2.0)
    assert backend_config(2.0, None, None)["client_resources"] == {"num_cpus": 2.0, "num_gpus": 0.5}
    assert backend_config(2.0, None, 1.0)["client_resources"]["num_gpus"] == 1.0
