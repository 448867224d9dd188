"""The Flower engine logs to a tracker as the vectorized engine does (the same ``Trainer.complete_round`` and
``Trainer.finish``): a comparison in one Flower simulation (the TensorBoard back end is read back on the vectorized
engine, tests/tracking/test_tracking.py)."""

import json

import pytest

pytest.importorskip("flwr")

from sstq_fl.experiments.compare import compare  # noqa: E402
from sstq_fl.fl.engine import RunConfig  # noqa: E402

from ..tracking.test_tracking import close, history, mlflow_runs, published  # noqa: E402

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")

CFG = dict(task="lsq", dim=10, n=200, clients=4, batch=10, clip=1.0, lr=0.5, rounds=2, engine="flower")


@pytest.fixture(autouse=True)
def _file_store(monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)


def test_a_flower_comparison_logs_one_mlflow_run_per_encoder(tmp_path):
    uri = (tmp_path / "mlruns").as_uri()
    out = compare(RunConfig(**CFG), ["sqkr", "sstq-flat:b=4"], tmp_path / "c", log_to=f"mlflow:{uri}")
    runs = mlflow_runs(uri)
    assert sorted(runs) == ["sqkr", "sstq-flat_b-4"] and all(r.info.status == "FINISHED" for r in runs.values())
    for row in out["rows"]:
        r = runs["sqkr" if row["encoder"] == "sqkr" else "sstq-flat_b-4"]
        assert r.data.params["encoder"] == row["encoder"] and r.data.params["engine"] == "flower"
        assert r.data.metrics["final/bits_per_client"] == row["bits_per_client"]
    m = json.loads((tmp_path / "c" / "sqkr" / "metrics.json").read_text())
    assert close(history(uri, runs["sqkr"].info.run_id, "epsilon_spent"), published(m["rounds"], "epsilon_spent"))
