"""Experiment trackers (``--log-to``): what a run logs, read back with each package's own reader
(TensorBoard's ``EventAccumulator``, MLflow's ``MlflowClient`` on the file store), that logging changes no
result and publishes nothing ``metrics.json`` does not, and the one-line refusals."""

import dataclasses
import json
import math
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from sstq_fl.cli import main
from sstq_fl.experiments.compare import compare
from sstq_fl.experiments.spec import parse_experiment
from sstq_fl.experiments.sweep import SweepOptions, sweep
from sstq_fl.fl.engine import RunConfig, run
from sstq_fl.tracking import TRACKERS, Tracker, run_params
from tests.fl.test_resume_transcript import stopped_after

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")

from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.hparams import plugin_data_pb2  # noqa: E402

LSQ = dict(task="lsq", dim=10, n=200, clients=5, batch=10, clip=1.0, lr=0.5, rounds=3, encoder="sqkr")
TIMINGS = ("wall_s", "setup_s")


@pytest.fixture(autouse=True)
def _file_store(monkeypatch):
    """MLflow 3 opens its file store only with this set (the user's opt-in, for the run and the reader)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of a TensorBoard event folder: ``[(step, value), ...]``."""
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def hparams(folder: Path) -> dict[str, object]:
    """The parameters of a TensorBoard run (the HParams session-start summary)."""
    acc = EventAccumulator(str(folder))
    acc.Reload()
    data = plugin_data_pb2.HParamsPluginData.FromString(acc.PluginTagToContent("hparams")["_hparams_/session_start_info"])
    return {k: v.string_value if v.HasField("string_value") else v.number_value
            for k, v in data.session_start_info.hparams.items()}


def mlflow_runs(uri: str) -> dict[str, object]:
    """The MLflow runs of experiment ``sstq-fl`` at ``uri``, by run name."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("sstq-fl")
    return {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}


def history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in MlflowClient(tracking_uri=uri).get_metric_history(run_id, key)]


def published(rounds: list[dict], key: str) -> list[tuple[int, float]]:
    return [(r["round"], r[key]) for r in rounds if key in r]


def close(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> bool:
    """The same steps and values (TensorBoard stores float32)."""
    return [s for s, _ in got] == [s for s, _ in want] and all(
        math.isclose(a, b, rel_tol=1e-6) for (_, a), (_, b) in zip(got, want, strict=True))


def test_tensorboard_holds_every_round_the_config_and_the_final_metrics(tmp_path):
    m = run(RunConfig(**LSQ), tmp_path / "r", progress=False, log_to=f"tensorboard:{tmp_path / 'tb'}")
    got = scalars(tmp_path / "tb" / "r")
    for key in ("epsilon_spent", "bits_per_client"):
        assert close(got[key], published(m["rounds"], key)), key
    for key in ("train_loss", "distance_to_optimum"):  # published labelled non-private: logged with the label
        assert close(got[f"non_private/{key}"], published(m["rounds"], key)), key
        assert key not in got
    f = m["final"]
    assert close(got["final/epsilon_total"], [(3, f["epsilon_total"])])
    assert close(got["final/non_private/distance_to_optimum"], [(3, f["distance_to_optimum"])])
    params = hparams(tmp_path / "tb" / "r")
    assert params["encoder"] == "sqkr" and params["rounds"] == 3 and params["data_dir"] == "None"
    assert set(params) == set(m["config"])


def test_mlflow_file_store_holds_every_round_the_config_and_the_final_metrics(tmp_path):
    uri = (tmp_path / "mlruns").as_uri()
    m = run(RunConfig(**LSQ), tmp_path / "r", progress=False, log_to=f"mlflow:{uri}")
    (r,) = mlflow_runs(uri).values()
    assert r.info.run_name == "r" and r.info.status == "FINISHED"
    assert r.data.params == {k: str(v) for k, v in run_params(m["config"]).items()}
    for key in ("epsilon_spent", "bits_per_client"):
        assert close(history(uri, r.info.run_id, key), published(m["rounds"], key)), key
    assert close(history(uri, r.info.run_id, "non_private/train_loss"), published(m["rounds"], "train_loss"))
    assert r.data.metrics["final/epsilon_total"] == m["final"]["epsilon_total"]


def test_a_plain_folder_is_the_mlflow_file_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(RunConfig(**LSQ), tmp_path / "r", progress=False, log_to="mlflow:mlruns")
    assert list(mlflow_runs((tmp_path / "mlruns").as_uri())) == ["r"]


def same_result(a: Mapping, b: Mapping) -> bool:
    """The same config, rounds and final values (but timings), floats to 1e-9: LAPACK's θ* of the least-squares
    task may differ in the last bit between two runs (tests/fl/test_engine.py)."""
    def same(x: Mapping, y: Mapping) -> None:
        assert x.keys() == y.keys()
        for k in set(x) - set(TIMINGS):
            assert x[k] == (pytest.approx(y[k], rel=1e-9) if isinstance(y[k], float) else y[k]), k

    assert a["config"] == b["config"] and len(a["rounds"]) == len(b["rounds"])
    for x, y in zip([a["final"], *a["rounds"]], [b["final"], *b["rounds"]], strict=True):
        same(x, y)
    return True


def test_logging_changes_no_result(tmp_path):
    plain = run(RunConfig(**LSQ), tmp_path / "plain", progress=False)
    tb = run(RunConfig(**LSQ), tmp_path / "tb", progress=False, log_to=f"tensorboard:{tmp_path / 'logs'}")
    ml = run(RunConfig(**LSQ), tmp_path / "ml", progress=False, log_to=f"mlflow:{tmp_path / 'mlruns'}")
    assert same_result(plain, tb) and same_result(plain, ml)
    files = {p.name for p in (tmp_path / "plain").iterdir()}
    assert files == {p.name for p in (tmp_path / "tb").iterdir()} == {p.name for p in (tmp_path / "ml").iterdir()}


def test_a_secure_run_logs_nothing_computed_on_the_pooled_private_data(tmp_path):
    """``pooled_diagnostics.json`` holds train_loss and the distance to θ*, labelled non-private; metrics.json has
    neither, and neither does the tracker."""
    cfg = RunConfig(**{**LSQ, "randomness": "secure", "pooled_diagnostics": True})
    m = run(cfg, tmp_path / "r", progress=False, log_to=f"tensorboard:{tmp_path / 'tb'}")
    assert json.loads((tmp_path / "r" / "pooled_diagnostics.json").read_text())["rounds"][0]["train_loss"] > 0
    got = scalars(tmp_path / "tb" / "r")
    assert set(got) == {"epsilon_spent", "bits_per_client", "final/epsilon_total", "final/bits_per_client",
                        "final/wall_s"}
    assert close(got["epsilon_spent"], published(m["rounds"], "epsilon_spent"))


def _interrupted(tmp_path: Path, log_to: str) -> None:
    """Round 3 of a run fails after rounds 1 and 2 were checkpointed (and logged)."""
    stopped_after(tmp_path / "r", after=2, log_to=log_to, **dataclasses.asdict(RunConfig(**LSQ)))


def test_a_resumed_run_logs_each_round_once(tmp_path):
    full = run(RunConfig(**LSQ), tmp_path / "full", progress=False)
    _interrupted(tmp_path, f"tensorboard:{tmp_path / 'tb'}")
    assert [s for s, _ in scalars(tmp_path / "tb" / "r")["epsilon_spent"]] == [1, 2]
    run(RunConfig(**LSQ), tmp_path / "r", resume=True, progress=False, log_to=f"tensorboard:{tmp_path / 'tb'}")
    assert close(scalars(tmp_path / "tb" / "r")["epsilon_spent"], published(full["rounds"], "epsilon_spent"))


def test_an_interrupted_mlflow_run_is_killed_and_its_resumption_logs_every_round(tmp_path):
    uri = (tmp_path / "mlruns").as_uri()
    full = run(RunConfig(**LSQ), tmp_path / "full", progress=False)
    _interrupted(tmp_path, f"mlflow:{uri}")
    (killed,) = mlflow_runs(uri).values()
    assert killed.info.status == "KILLED" and [s for s, _ in history(uri, killed.info.run_id, "epsilon_spent")] == [1, 2]
    run(RunConfig(**LSQ), tmp_path / "r", resume=True, progress=False, log_to=f"mlflow:{uri}")
    (resumed,) = [r for r in MlflowClient(uri).search_runs([killed.info.experiment_id]) if r.info.status == "FINISHED"]
    assert close(history(uri, resumed.info.run_id, "epsilon_spent"), published(full["rounds"], "epsilon_spent"))


class Failing(Tracker):
    """A back end whose every round fails (a full disk, a tracking server gone)."""

    package = ""

    def start(self, run_name, params):
        Path(self.location, "started").write_text(run_name)

    def log_round(self, step, metrics):
        raise OSError("No space left on device")

    def finish(self, final):
        Path(self.location, "finished").write_text(repr(final))


def test_a_failing_tracker_stops_logging_with_one_warning_and_the_run_goes_on(tmp_path, caplog):
    saved = TRACKERS.snapshot()
    TRACKERS.register("failing", Failing)
    try:
        plain = run(RunConfig(**LSQ), tmp_path / "plain", progress=False)
        logged = run(RunConfig(**LSQ), tmp_path / "r", progress=False, log_to=f"failing:{tmp_path}")
    finally:
        TRACKERS.restore(saved)
    assert (tmp_path / "started").read_text() == "r" and (tmp_path / "finished").read_text() == "None"
    assert same_result(plain, logged)
    warned = [r.getMessage() for r in caplog.records if "logging stopped" in r.getMessage()]
    assert warned == [f"--log-to failing:{tmp_path}: logging stopped (OSError: No space left on device); the run goes on"]


def test_compare_logs_one_tracker_run_per_encoder(tmp_path):
    uri = (tmp_path / "mlruns").as_uri()
    compare(RunConfig(**LSQ), ["sqkr", "clean"], tmp_path / "c", log_to=f"mlflow:{uri}")
    runs = mlflow_runs(uri)
    assert sorted(runs) == ["clean", "sqkr"] and {r.data.params["encoder"] for r in runs.values()} == {"sqkr", "clean"}
    assert runs["clean"].data.metrics["final/epsilon_total"] == math.inf  # the clean encoder is not private


def test_sweep_logs_one_tracker_run_per_cell_named_after_it(tmp_path):
    grid = parse_experiment(b'task = "lsq"\ndim = 10\nn = 200\nclients = 5\nrounds = 2\nencoder = "sqkr"\n'
                            b"seed = [0, 1]\n", "grid.toml")
    sweep(grid, tmp_path / "s", SweepOptions(executor="local", log_to=f"tensorboard:{tmp_path / 'tb'}"))
    cells = sorted(p.name for p in (tmp_path / "s" / "cells").iterdir())
    assert cells == ["seed-0", "seed-1"] and sorted(p.name for p in (tmp_path / "tb").iterdir()) == cells
    for cell in cells:
        m = json.loads((tmp_path / "s" / "cells" / cell / "metrics.json").read_text())
        assert close(scalars(tmp_path / "tb" / cell)["epsilon_spent"], published(m["rounds"], "epsilon_spent"))
        assert hparams(tmp_path / "tb" / cell)["seed"] == m["config"]["seed"]


@pytest.mark.parametrize("spec, message", [
    ("wandb:runs", "--log-to wandb:runs: unknown tracker 'wandb' (known: mlflow, tensorboard)"),
    ("runs", "--log-to runs: expected SCHEME:LOCATION"),
    ("tensorboard:", "--log-to tensorboard:: no location after tensorboard:"),
])
def test_a_bad_spec_is_one_line_before_anything_is_written(tmp_path, capsys, spec, message):
    args = ["--task", "lsq", "--dim", "10", "--n", "200", "--clients", "5", "--rounds", "2"]
    for cmd in (["run", *args, "--encoder", "sqkr"], ["compare", *args, "--encoders", "sqkr"]):
        assert main([*cmd, "--out", str(tmp_path / "o"), "--log-to", spec]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"sstq-fl: error: {message}") and err.count("\n") == 1
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("package, spec", [("mlflow", "mlflow:file:///tmp/mlruns"), ("tensorboard", "tensorboard:tb")])
def test_a_missing_package_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch, package, spec):
    monkeypatch.setitem(sys.modules, package, None)  # importlib.util.find_spec: not installed
    grid = tmp_path / "grid.toml"
    grid.write_text('task = "lsq"\ndim = 10\nn = 200\nclients = 5\nrounds = 2\nseed = [0, 1]\n')
    for cmd in (["run", "--task", "lsq", "--out", str(tmp_path / "o")], ["sweep", str(grid), "--out", str(tmp_path / "o")]):
        assert main([*cmd, "--log-to", spec]) == 2
        assert capsys.readouterr().err == (f"sstq-fl: error: --log-to {spec}: the {package} package is not installed; "
                                           f"pip install 'sstq-fl[tracking]'\n")
        assert not (tmp_path / "o").exists()


def test_neither_package_is_imported_unless_its_back_end_is_chosen():
    code = ("import sys; import sstq_fl.tracking as t, sstq_fl.fl.engine, sstq_fl.cli; "
            "t.check_spec('tensorboard:x'); t.check_spec('mlflow:x'); t.open_tracker(None); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorboard', 'mlflow') "
            "or m.startswith('torch.utils.tensorboard')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_location_the_back_end_cannot_open_is_one_line(tmp_path, capsys):
    args = ["run", "--task", "lsq", "--dim", "10", "--n", "200", "--clients", "5", "--rounds", "2", "--encoder", "sqkr"]
    assert main([*args, "--out", str(tmp_path / "o"), "--log-to", "mlflow:foo://bar"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sstq-fl: error: --log-to mlflow:foo://bar: ") and "'foo://bar'" in err and err.count("\n") == 1
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_an_mlflow_file_store_without_the_users_opt_in_is_refused_in_one_line(tmp_path, monkeypatch):
    import os

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    from sstq_fl.tracking import open_tracker

    with pytest.raises(ValueError, match="MLFLOW_ALLOW_FILE_STORE=true") as info:
        open_tracker(f"mlflow:{tmp_path / 'mlruns'}")
    assert "\n" not in str(info.value) and "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # nothing set for the user
