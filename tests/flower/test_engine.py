"""The Flower engine (Flower's simulation engine on Ray) against the vectorized engine."""

import json

import numpy as np
import pytest

pytest.importorskip("flwr")

from sstq_fl.fl.engine import RunConfig, run  # noqa: E402
from sstq_fl.flower.apps.sstq_server import run_flower  # noqa: E402

from ..fl.test_engine import same_rounds  # noqa: E402
from .faults import faulty_app  # noqa: E402

CFG = dict(task="lsq", dim=20, n=400, clients=8, batch=20, clip=1.0, lr=0.5, rounds=4, encoder="sstq-flat:b=4")


def test_flower_engine_matches_vectorized_and_survives_faulty_clients(tmp_path, monkeypatch):
    """The shipped app ignores ``$SSTQ_FL_FAULTS`` (set for both runs: its run is the vectorized engine's, with no
    dropout); the test app (tests/flower/faults.py) injects them and the run goes on without the faulty replies."""
    ref = run(RunConfig(**CFG), tmp_path / "v", progress=False)
    monkeypatch.setenv("SSTQ_FL_FAULTS", json.dumps([{"client": 3, "round": 2, "kind": "raise"},
                                                     {"client": 5, "round": 3, "kind": "garbage"}]))
    flw = run(RunConfig(engine="flower", **CFG), tmp_path / "f", progress=False)
    assert all(not r["dropped"] for r in flw["rounds"])  # no environment variable changes what it sends
    assert same_rounds(flw["rounds"], ref["rounds"], rel=1e-6)
    assert json.loads((tmp_path / "f" / "metrics.json").read_text())["config"]["engine"] == "flower"
    bad = run_flower(RunConfig(engine="flower", **CFG), tmp_path / "bad", client_app=faulty_app)
    r2, r3 = bad["rounds"][1], bad["rounds"][2]
    assert [d["client"] for d in r2["dropped"]] == [3] and "client raised" in r2["dropped"][0]["reason"]
    assert [d["client"] for d in r3["dropped"]] == [5] and "truncated" in r3["dropped"][0]["reason"]
    assert len(bad["rounds"]) == 4 and same_rounds(bad["rounds"][:1], ref["rounds"][:1], rel=1e-6)


@pytest.mark.slow  # a second Ray cluster, ~50 s: kept out of CI's 20 minutes (run with -m slow)
def test_flower_engine_attaches_to_an_existing_ray_cluster(tmp_path):
    """A local Ray head on loopback (``ray start --head``), the run attached to it, then only this head's
    processes stopped (``ray stop`` would stop every Ray cluster on the machine: another run's, a sweep's)."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from sstq_fl.flower.apps.sstq_server import run_flower

    ray = str(Path(sys.executable).with_name("ray"))
    port, temp = _free_port(), tempfile.mkdtemp(prefix="rh", dir="/tmp")  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
    try:
        subprocess.run([ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                        "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"], check=True,
                       capture_output=True, env=env, timeout=180)
        cfg = RunConfig(engine="flower", **{**CFG, "rounds": 2})
        res = run_flower(cfg, tmp_path / "cluster", ray_address=f"127.0.0.1:{port}")
        ref = run(RunConfig(**{**CFG, "rounds": 2}), tmp_path / "v", progress=False)
        assert same_rounds(res["rounds"], ref["rounds"], rel=1e-6)
    finally:
        _stop_own_cluster(temp, port)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow  # 89 s on 2 cores; a node that misses the round timeout is in CI via tests/deployment (SIGKILLed node)
def test_a_client_that_times_out_is_left_out_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("SSTQ_FL_FAULTS", json.dumps([{"client": 2, "round": 2, "kind": "sleep:20"}]))
    # in secure mode (client keys drawn inside the ClientApps, participants from the server's CSPRNG); a round
    # timeout above a round on a loaded 2-core box, below the sleep
    res = run_flower(RunConfig(engine="flower", randomness="secure", pooled_diagnostics=True, **{**CFG, "rounds": 3}),
                     tmp_path / "slow", client_app=faulty_app, round_timeout=12.0)
    r2 = res["rounds"][1]
    assert [d["client"] for d in r2["dropped"]] == [2] and "timeout" in r2["dropped"][0]["reason"]
    pooled = json.loads((tmp_path / "slow" / "pooled_diagnostics.json").read_text())["rounds"]
    assert len(res["rounds"]) == 3 and np.isfinite(pooled[-1]["distance_to_optimum"])
    assert "distance_to_optimum" not in res["final"]  # secure: computed on the pooled data, not published
    assert res["randomness"]["mode"] == "secure" and all("encode_stats" not in r for r in res["rounds"])


COHORT = dict(task="lsq", dim=20, n=800, clients=40, batch=20, clip=1.0, lr=0.5, rounds=2, encoder="sstq-flat:b=4")


def test_cohort_nodes_give_the_in_process_engines_rounds(tmp_path):
    """40 virtual clients on 4 simulated nodes of 10 (one batched gradient and encode per node, one
    message per client): reproducible mode gives the in-process engine's per-round metrics; secure
    mode (each virtual client keys its own coins inside its node) runs in the same simulation."""
    from sstq_fl.flower.apps.sstq_server import run_flower_many

    ref = run(RunConfig(**COHORT), tmp_path / "v", progress=False)
    flw, sec = run_flower_many([(RunConfig(engine="flower", clients_per_node=10, **COHORT), tmp_path / "f", False),
                                (RunConfig(engine="flower", clients_per_node=10, pooled_diagnostics=True,
                                           **{**COHORT, "randomness": "secure"}), tmp_path / "s", False)])
    assert same_rounds(flw["rounds"], ref["rounds"], rel=1e-6)
    assert all(r["clients"] == 40 and r["dropped"] == [] for r in flw["rounds"] + sec["rounds"])
    assert flw["final"]["epsilon_total"] == pytest.approx(ref["final"]["epsilon_total"])
    pooled = json.loads((tmp_path / "s" / "pooled_diagnostics.json").read_text())["rounds"]
    assert sec["randomness"]["mode"] == "secure" and np.isfinite(pooled[-1]["distance_to_optimum"])
    assert "distance_to_optimum" not in sec["final"] and "train_loss" not in sec["rounds"][-1]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_own_cluster(temp_dir: str, port: int) -> None:
    """Stop only this test's Ray processes (its temp dir or port in their command line), never others'."""
    import os
    import re
    import signal
    import subprocess
    import time

    mine = re.compile(rf"{re.escape(temp_dir)}|:{port}( |$)")

    def pids() -> list[int]:
        out = subprocess.run(["pgrep", "-af", "ray"], capture_output=True, text=True).stdout.splitlines()
        return [int(line.split()[0]) for line in out if mine.search(line) and int(line.split()[0]) != os.getpid()]

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(3)
    assert not pids(), f"ray processes left behind: {pids()}"


def _start_head_and_worker(port: int, temp_dir: str) -> None:
    """``ray start --head`` then ``ray start --address`` (a worker node) on loopback, one CPU each."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    exe, env = str(Path(sys.executable).with_name("ray")), {**os.environ, "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    subprocess.run([exe, "start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp_dir}",
                    *common], check=True, capture_output=True, env=env, timeout=180)
    subprocess.run([exe, "start", f"--address=127.0.0.1:{port}", *common], check=True, capture_output=True, env=env,
                   timeout=180)


@pytest.mark.slow
def test_cohort_nodes_spread_over_a_ray_cluster_with_a_head_and_a_worker(tmp_path):
    """``ray start --head`` and ``ray start --address`` (a worker node) on loopback, one CPU each; the run
    attaches with ``ray_address``: its cohort nodes' actors run on both Ray nodes, and the rounds are the
    in-process engine's.  Only this cluster's processes are stopped (other tests' clusters live on)."""
    import shutil
    import tempfile

    import ray

    from sstq_fl.flower.apps.sstq_server import run_flower

    # a short temp dir: Ray's socket paths under it must fit AF_UNIX's 107 bytes
    port, temp = _free_port(), tempfile.mkdtemp(prefix="rc", dir="/tmp")
    try:
        _start_head_and_worker(port, temp)
        cfg = RunConfig(engine="flower", clients_per_node=10, **COHORT)
        res = run_flower(cfg, tmp_path / "cluster", ray_address=f"127.0.0.1:{port}", client_cpus=1.0)
        assert same_rounds(res["rounds"], run(RunConfig(**COHORT), tmp_path / "v", progress=False)["rounds"], rel=1e-6)
        ray.init(address=f"127.0.0.1:{port}", logging_level="ERROR")
        try:
            actors = [a for a in ray._private.state.actors().values() if "ClientAppActor" in str(a.get("ActorClassName"))]
            assert len(ray.nodes()) == 2 and len({a["Address"]["NodeID"] for a in actors}) == 2
        finally:
            ray.shutdown()
    finally:
        _stop_own_cluster(temp, port)
        shutil.rmtree(temp, ignore_errors=True)
