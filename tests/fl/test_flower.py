"""The Flower engine (Flower's simulation engine on Ray) against the vectorized engine."""

import json

import numpy as np
import pytest

pytest.importorskip("flwr")

from sstq_fl.fl.engine import RunConfig, run  # noqa: E402

from .test_engine import same_rounds  # noqa: E402

CFG = dict(task="lsq", dim=20, n=400, clients=8, batch=20, clip=1.0, lr=0.5, rounds=4, encoder="sstq-flat:b=4")


def test_flower_engine_matches_vectorized_and_survives_faulty_clients(tmp_path, monkeypatch):
    ref = run(RunConfig(**CFG), tmp_path / "v", progress=False)
    flw = run(RunConfig(engine="flower", **CFG), tmp_path / "f", progress=False)
    assert same_rounds(flw["rounds"], ref["rounds"], rel=1e-6)
    assert json.loads((tmp_path / "f" / "metrics.json").read_text())["config"]["engine"] == "flower"

    monkeypatch.setenv("SSTQ_FL_FAULTS", json.dumps([{"client": 3, "round": 2, "kind": "raise"},
                                                     {"client": 5, "round": 3, "kind": "garbage"}]))
    bad = run(RunConfig(engine="flower", **CFG), tmp_path / "bad", progress=False)
    r2, r3 = bad["rounds"][1], bad["rounds"][2]
    assert [d["client"] for d in r2["dropped"]] == [3] and "client raised" in r2["dropped"][0]["reason"]
    assert [d["client"] for d in r3["dropped"]] == [5] and "truncated" in r3["dropped"][0]["reason"]
    assert len(bad["rounds"]) == 4 and same_rounds(bad["rounds"][:1], ref["rounds"][:1], rel=1e-6)


def test_flower_engine_attaches_to_an_existing_ray_cluster(tmp_path):
    """A local Ray head on loopback (``ray start --head``), the run attached to it, then ``ray stop``."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    from strategies.sstq_server import run_flower

    ray = str(Path(sys.executable).with_name("ray"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
    subprocess.run([ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                    "--include-dashboard=false", "--disable-usage-stats"], check=True, capture_output=True, env=env,
                   timeout=180)
    try:
        cfg = RunConfig(engine="flower", **{**CFG, "rounds": 2})
        res = run_flower(cfg, tmp_path / "cluster", ray_address=f"127.0.0.1:{port}")
        ref = run(RunConfig(**{**CFG, "rounds": 2}), tmp_path / "v", progress=False)
        assert same_rounds(res["rounds"], ref["rounds"], rel=1e-6)
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, env=env, timeout=120)
    left = subprocess.run(["pgrep", "-f", f"gcs_server.*{port}"], capture_output=True, text=True).stdout.strip()
    assert not left, f"ray processes left behind: {left}"


def test_a_client_that_times_out_is_left_out_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("SSTQ_FL_FAULTS", json.dumps([{"client": 2, "round": 2, "kind": "sleep:20"}]))
    monkeypatch.setenv("SSTQ_FL_ROUND_TIMEOUT", "8")
    # in secure mode (client keys drawn inside the ClientApps, participants from the server's CSPRNG)
    res = run(RunConfig(engine="flower", randomness="secure", **{**CFG, "rounds": 3}), tmp_path / "slow", progress=False)
    r2 = res["rounds"][1]
    assert [d["client"] for d in r2["dropped"]] == [2] and "timeout" in r2["dropped"][0]["reason"]
    assert len(res["rounds"]) == 3 and np.isfinite(res["final"]["distance_to_optimum"])
    assert res["randomness"]["mode"] == "secure" and all("encode_stats" not in r for r in res["rounds"])
