"""The Flower apps' run config (``[tool.flwr.app.config]``, ``--run-config``) read into a run and its tracker."""

import pytest


def test_the_flower_run_config_reads_log_to(tmp_path):
    from sstq_fl.flower.run_config import config_from_run_config, tracking_from_run_config

    rc = {"task": "lsq", "log-to": f"tensorboard:{tmp_path}"}
    assert config_from_run_config(rc)[0].task == "lsq"
    assert tracking_from_run_config(rc).log_to == f"tensorboard:{tmp_path}"
    assert tracking_from_run_config({"log-to": ""}).log_to is None
    with pytest.raises(ValueError, match="unknown tracker 'x'"):
        tracking_from_run_config({"log-to": "x:y"})

