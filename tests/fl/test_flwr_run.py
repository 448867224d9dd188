"""``flwr run .``: the app configured in pyproject.toml, on Flower's local simulation SuperLink.

The run goes through Flower's own CLI (FAB build, a managed local SuperLink, the simulation
runtime on Ray), and its per-round metrics must equal the vectorized engine's for the same
config and seed.  The SuperLink runs under a private ``FLWR_HOME`` and is stopped afterwards.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sstq_fl.fl.engine import RunConfig, run

from .test_engine import same_rounds

ROOT = Path(__file__).resolve().parents[2]
# reproducible randomness, so that the numbers can be compared with the vectorized engine (the app default is secure)
CFG = dict(task="lsq", dim=20, n=400, clients=4, batch=20, clip=1.0, lr=0.5, rounds=3, encoder="sqkr",
           randomness="reproducible")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill_superlink(home: Path) -> None:
    pids = subprocess.run(["pgrep", "-f", f"flower-superlink.*{home}"], capture_output=True, text=True).stdout.split()
    for pid in pids:
        os.kill(int(pid), signal.SIGTERM)


def _override(cfg: dict, out: Path) -> str:
    vals = [f"{k.replace('_', '-')}={json.dumps(v)}" for k, v in cfg.items()]
    return " ".join(vals + [f"out-dir={json.dumps(str(out))}"])


def _flwr_env(home: Path) -> dict[str, str]:
    """``flwr run``'s environment: a private FLWR_HOME, free ports, and no runtime dependency installation
    (the managed local SuperLink inherits it when ``flwr run`` starts it; without it every run builds
    a fresh environment from PyPI under FLWR_HOME/runtime-envs: 5.1 GB with CUDA torch, measured)."""
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "FLWR_HOME": str(home), "PATH": f"{bindir}:{os.environ['PATH']}",
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(_free_port()), "FLWR_LOCAL_CONTROL_API_PORT": str(_free_port()),
            "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}


def _flwr_run(env: dict[str, str], cfg: dict, out: Path, supernodes: int, cwd: Path) -> subprocess.CompletedProcess:
    flwr = str(Path(sys.executable).with_name("flwr"))
    cmd = [flwr, "run", str(ROOT), "--stream", "--federation-config",
           f"num-supernodes={supernodes} client-resources-num-cpus=1", "-c", _override(cfg, out)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, cwd=cwd)


def test_flwr_run_dot_matches_the_vectorized_engine(tmp_path):
    home = tmp_path / "flwr-home"
    try:
        p = _flwr_run(_flwr_env(home), CFG, tmp_path / "out", CFG["clients"], tmp_path)
    finally:
        _kill_superlink(home)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert not (home / "runtime-envs").exists()  # the project's environment, no per-run install
    got = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert got["config"]["engine"] == "flower" and len(got["rounds"]) == CFG["rounds"]
    ref = run(RunConfig(**CFG), tmp_path / "v", progress=False)
    # the deployment path publishes no train_loss (pooled private data); the rest equals the vectorized run
    assert all("train_loss" not in r for r in got["rounds"])
    assert same_rounds(got["rounds"], [{k: v for k, v in r.items() if k != "train_loss"} for r in ref["rounds"]], rel=1e-6)
    assert (tmp_path / "out" / "transcript.jsonl").exists()
    # the sstq_fl loggers reach the streamed log (configure_logging in the ServerApp): per round, and the end
    assert f"rounds {CFG['rounds']}/{CFG['rounds']}" in p.stdout + p.stderr and "sstq-fl run finished" in p.stdout + p.stderr


def _run_status(env: dict[str, str], stdout: str, cwd: Path) -> dict:
    """The run's row in ``flwr list --run-id N --format json`` (N read from ``flwr run``'s output)."""
    run_id = re.search(r"Successfully started run (\d+)", stdout)
    assert run_id, stdout[-2000:]
    flwr = str(Path(sys.executable).with_name("flwr"))
    p = subprocess.run([flwr, "list", "--run-id", run_id.group(1), "--format", "json"], env=env, capture_output=True,
                       text=True, timeout=60, cwd=cwd)
    return dict(json.loads(p.stdout)["runs"][0])


@pytest.mark.slow  # a flwr run, ~40 s: kept out of CI's 20 minutes (run with -m slow)
def test_flwr_run_with_fewer_supernodes_than_clients_fails_at_once(tmp_path):
    """``num-supernodes`` < ``clients`` fails at the first round with a clear message in the stream
    (it waited 120 s for the missing nodes; more nodes than clients: tests/fl/test_flower_inputs.py).

    ``flwr run``'s exit status stays 0 (Flower 1.42: it says the run was submitted and its log
    stream ended; the outcome is the run's status, ``finished:failed`` here)."""
    home, env = tmp_path / "flwr-home", _flwr_env(tmp_path / "flwr-home")
    try:
        t0 = time.monotonic()
        p = _flwr_run(env, CFG, tmp_path / "out", 2, tmp_path)
        took = time.monotonic() - t0
        status = _run_status(env, p.stdout, tmp_path)
    finally:
        _kill_superlink(home)
    assert "the federation has 2 SuperNodes" in p.stdout and '"num-supernodes=4"' in p.stdout, p.stdout[-3000:]
    assert took < 90 and p.returncode == 0
    assert status["status"] == "finished:failed" and "the federation has 2 SuperNodes" in status["status-details"]
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_run_config_maps_onto_runconfig(tmp_path):
    from sstq_fl.flower.apps.sstq_server import config_from_run_config

    cfg, out, resume = config_from_run_config({"encoder": "sqkr", "server-cap": 5.0, "budget-epsilon": 0.0, "data-dir": "",
                                                "out-dir": str(tmp_path), "resume": True})
    assert cfg.encoder == "sqkr" and cfg.server_cap == 5.0 and cfg.budget_epsilon is None and cfg.data_dir is None
    assert cfg.engine == "flower" and out == tmp_path.resolve() and resume
    with pytest.raises(ValueError, match="unknown key 'encodr'"):
        config_from_run_config({"encodr": "sqkr"})


def test_pyproject_app_config_is_a_valid_runconfig():
    import tomllib

    from sstq_fl.flower.apps.sstq_server import config_from_run_config

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert conf["components"] == {"serverapp": "sstq_fl.flower.apps.sstq_server:app",
                                  "clientapp": "sstq_fl.flower.apps.sstq_client:app"}
    cfg, _, resume = config_from_run_config(conf["config"])
    assert cfg.task == "fmnist" and not resume
    assert cfg.randomness == "secure" and not cfg.diagnostics  # the deployment default


def test_the_app_config_also_configures_the_dp_workloads(tmp_path):
    import tomllib

    from sstq_fl.flower.run_config import workload_from_run_config, workload_of
    from sstq_fl.gen.mepf.pipeline import run_dp_mepf
    from sstq_fl.gen.vqg.pipeline import run_dp_vqg

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert workload_of(conf) == "train"
    cfg, run = workload_from_run_config({**conf, "workload": "dp-mepf", "mepf-moments": "1,2"})
    assert run is run_dp_mepf and cfg.engine == "flower" and cfg.moments == (1, 2) and cfg.clients == conf["clients"]
    assert cfg.generator_steps is None and cfg.randomness == "secure"
    vqg, run = workload_from_run_config({**conf, "workload": "dp-vqg", "vqg-variant": "pp", "vqg-records": -1})
    assert run is run_dp_vqg and vqg.variant == "pp" and vqg.records == 0 and vqg.steps is None and vqg.engine == "flower"
    assert vqg.epsilon == conf["epsilon"] and vqg.mode == "A"
    from sstq_fl.gen.straightdp.pipeline import run_straightdp

    sdp, run = workload_from_run_config({**conf, "workload": "straightdp", "sdp-method": "sgd", "sdp-tha": True})
    assert run is run_straightdp and sdp.method == "sgd" and sdp.tha and sdp.beta is None and sdp.tau is None
    assert sdp.sgd_steps is None and sdp.public_records is None and sdp.engine == "flower" and sdp.clip == 1.0
    assert workload_from_run_config({**conf, "workload": "straightdp", "sdp-beta": 0.0})[0].beta == 0.0
    with pytest.raises(ValueError, match="unknown key 'mepf-nope'"):
        workload_from_run_config({"workload": "dp-mepf", "mepf-nope": 1})
    with pytest.raises(ValueError, match="unknown workload 'gan'"):
        workload_of({"workload": "gan"})


@pytest.mark.slow
def test_flwr_run_dot_with_a_dp_workload_is_refused_by_nodes_that_did_not_opt_in(tmp_path):
    """``workload="dp-mepf"`` through ``flwr run``: Flower's simulated SuperNodes have no node config, so none has
    opted in to a trusted aggregator and every client refuses the labelled sums (the run config cannot opt in).
    The same workload on nodes that opt in: ``sstq-fl gen --engine flower`` (tests/flower/apps/test_gen_server.py)
    and a deployment (tests/deployment)."""
    tiny = {"workload": "dp-mepf", "clients": 2, "epsilon": 1.0, "randomness": "reproducible", "mepf-records": 400,
            "mepf-generator-steps": 40, "mepf-eval-samples": 200, "mepf-probe-epochs": 1, "mepf-evaluator-epochs": 1,
            "mepf-public-records": 3000, "mepf-cache-dir": str(tmp_path / "cache"),
            "mepf-dataset-ledger": str(tmp_path / "ledger.jsonl")}
    home = tmp_path / "flwr-home"
    try:
        p = _flwr_run(_flwr_env(home), tiny, tmp_path / "out", 2, tmp_path)
    finally:
        _kill_superlink(home)
    logs = p.stdout + p.stderr
    assert "trusted aggregator not opted in" in logs, logs[-3000:]
    assert not (tmp_path / "out" / "metrics.json").exists()
