"""The Flower plumbing both stacks share: the round timeout is one helper, a run-config key first."""

from sstq_fl.flower.plumbing import ROUND_TIMEOUT_S, WORKLOAD_TIMEOUT_S, round_timeout


def test_the_round_timeout_is_the_run_configs_then_the_environments_then_the_stacks_default(monkeypatch):
    monkeypatch.delenv("SSTQ_FL_ROUND_TIMEOUT", raising=False)
    assert round_timeout() == ROUND_TIMEOUT_S == 600 and round_timeout({}, WORKLOAD_TIMEOUT_S) == 1800
    assert round_timeout({"round-timeout": 0.0}) == 600  # TOML's unset
    monkeypatch.setenv("SSTQ_FL_ROUND_TIMEOUT", "45")
    assert round_timeout({"round-timeout": 0}) == 45 and round_timeout(None, WORKLOAD_TIMEOUT_S) == 45
    assert round_timeout({"round-timeout": 12.5}, WORKLOAD_TIMEOUT_S) == 12.5
