"""``trust=secagg``: the vectorized secure sum, its ledger, resume and refusals (Flower's SecAgg+: tests/flower)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sstq_fl.fl.engine import RunConfig, Trainer
from sstq_fl.fl.secure_aggregation import SecureAggregation, survivors_needed
from sstq_fl.privacy.events import DistributedDiscreteGaussianEvent, SkellamSumEvent
from sstq_fl.privacy.ledger import PrivacyLedger
from tests.fl.test_resume_transcript import stopped_after

CFG = dict(task="lsq", dim=40, n=1500, clients=12, rounds=4, trust="secagg", encoder="clean", central_epsilon=4.0,
           clip=1.0, lr=0.3, seed=3)


def test_the_run_meets_its_central_epsilon_and_its_transcript_replays(tmp_path: Path) -> None:
    cfg = RunConfig(**CFG)
    res = Trainer(cfg).train(tmp_path / "r")
    central = res["final"]["epsilon_central"]
    assert central["epsilon"] <= 4.0 + 1e-9 and central["epsilon"] > 3.9  # calibrated to the target, never above
    assert "modular sum" in central["threat_model"]
    led, _ = PrivacyLedger.from_transcript(tmp_path / "r" / "transcript_central.jsonl")
    assert led.accountant() == "rdp" and led.epsilon(cfg.delta) == pytest.approx(central["epsilon"], rel=1e-12)
    assert [type(e.event) for e in led.entries] == [DistributedDiscreteGaussianEvent] * 4
    rounds = res["rounds"]
    assert all(r["bits_per_client"] == 64 * 16 for r in rounds if r["round"] > 0)  # padded 40 → 64 coordinates, 16 bits
    assert res["final"]["bits_per_client"] == 64 * 16  # the share, not the clean encoder's 32-bit floats
    assert [r["epsilon_central"] for r in rounds if r["round"] > 0] == sorted(r["epsilon_central"] for r in rounds
                                                                             if r["round"] > 0)


def test_the_released_mean_is_the_clients_clipped_mean_plus_noise(tmp_path: Path) -> None:
    """With the noise of a large ε the decoded mean equals the mean of the clipped gradients to the grid's precision."""
    cfg = RunConfig(**{**CFG, "central_epsilon": 1e4, "secagg_bits": 24})
    tr = Trainer(cfg)
    sa = tr.trusted
    assert isinstance(sa, SecureAggregation)
    ids = np.arange(cfg.clients)
    theta = torch.zeros(tr.task.dim, dtype=torch.float64)
    shares = tr.clients.shares(sa, theta, 1, ids)
    assert shares.shape == (cfg.clients, 64) and shares.min() >= 0 and shares.max() < 2**24
    got = sa.mean(sa.modular_sum(shares), cfg.clients, 1).numpy()
    g, _ = tr.clients.gradients(theta, 1, ids, None)
    norms = torch.linalg.vector_norm(g, dim=1, keepdim=True)
    want = (g * torch.clamp(cfg.clip / norms, max=1.0)).mean(0).numpy()
    c = sa.codec  # the mean's noise per coordinate: n shares of variance σ² + 1/4 (noise, rounding) in grid steps γ
    std = math.sqrt(cfg.clients * (c.local_stddev**2 + 0.25)) * c.scale / cfg.clients
    assert np.abs(got - want).max() < 5 * std and np.abs(got - want).max() > 0.05 * std  # noisy, as declared
    assert (got - want).std() == pytest.approx(std, rel=0.35)


def test_skellam_runs_on_the_same_ledger(tmp_path: Path) -> None:
    res = Trainer(RunConfig(**{**CFG, "secagg_noise": "skellam"})).train(tmp_path / "s")
    assert res["final"]["epsilon_central"]["epsilon"] <= 4.0 + 1e-9
    led, _ = PrivacyLedger.from_transcript(tmp_path / "s" / "transcript_central.jsonl")
    assert isinstance(led.entries[0].event, SkellamSumEvent)


def test_a_round_below_the_threshold_releases_nothing_and_is_not_charged(tmp_path: Path) -> None:
    cfg = RunConfig(**{**CFG, "sampling_rate": 0.3, "rounds": 6, "secagg_dropout": 0.0})
    tr = Trainer(cfg)
    res = tr.train(tmp_path / "p")
    assert tr.trusted is not None
    low = [r for r in res["rounds"] if r["round"] > 0 and r["clients"] < tr.trusted.min_clients]
    assert low and all(r["bits_per_client"] == 0 and r["messages_central"] == 0 for r in low)
    led, _ = PrivacyLedger.from_transcript(tmp_path / "p" / "transcript_central.jsonl")
    assert sum(e.count for e in led.entries) == 6 - len(low)


def test_dropout_tolerance_charges_the_fewest_survivors() -> None:
    assert survivors_needed(100, 0.0, 100) == 99 and survivors_needed(100, 0.2, 100) == 80
    assert survivors_needed(30.0, 0.5, 100) == 15
    hi = Trainer(RunConfig(**CFG)).trusted
    lo = Trainer(RunConfig(**{**CFG, "secagg_dropout": 0.5})).trusted
    assert isinstance(hi, SecureAggregation) and isinstance(lo, SecureAggregation)
    assert lo.min_clients == 6 and lo.codec.local_stddev > hi.codec.local_stddev  # fewer survivors: more noise each


def test_resume_replays_the_central_ledger(tmp_path: Path) -> None:
    """A run interrupted after round 2 and resumed ends where the uninterrupted one does: the same decoded sums,
    the same central ledger (each round charged once), the same ε; another plan is refused, not re-accounted."""
    cfg = RunConfig(**CFG)
    whole_tr = Trainer(cfg)
    whole = whole_tr.train(tmp_path / "whole")
    stopped_after(tmp_path / "half", after=2, **dataclasses.asdict(cfg))
    with pytest.raises(ValueError):  # another plan (2 rounds) is refused
        Trainer(dataclasses.replace(cfg, rounds=2)).train(tmp_path / "half", resume=True)
    again = Trainer(cfg)
    got = again.train(tmp_path / "half", resume=True)
    assert isinstance(again.trusted, SecureAggregation) and isinstance(whole_tr.trusted, SecureAggregation)
    assert again.trusted.sums == {t: h for t, h in whole_tr.trusted.sums.items() if t > 2}
    assert got["final"]["epsilon_central"]["epsilon"] == whole["final"]["epsilon_central"]["epsilon"]
    assert [r["epsilon_central"] for r in got["rounds"]] == [r["epsilon_central"] for r in whole["rounds"]]
    led, _ = PrivacyLedger.from_transcript(tmp_path / "half" / "transcript_central.jsonl")
    assert sum(e.count for e in led.entries) == cfg.rounds


@pytest.mark.parametrize(("bad", "message"), [
    ({"encoder": "sqkr"}, "encoder clean"),
    ({"central_epsilon": 0.0}, "central-epsilon > 0"),
    ({"engine": "flower", "clients": 2}, "at least 3 clients"),
    ({"engine": "flower", "client_budget_epsilon": 3.0}, "client ledgers count LDP releases only"),
])
def test_bad_secagg_configs_are_refused_in_one_line(bad: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        RunConfig(**{**CFG, **bad})
    assert "\n" not in str(info.value)


def test_an_unreachable_epsilon_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="unreachable") as info:
        Trainer(RunConfig(**{**CFG, "central_epsilon": 1e-3, "secagg_bits": 4}))
    assert "\n" not in str(info.value)

