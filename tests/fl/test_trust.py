"""``trust=shuffler`` (the decoder gets the round's bytes in random order) and ``trust=curator`` (Gaussian noise on
the clipped sum): each run reports its central ε beside the local one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sstq_fl.cli import main
from sstq_fl.fl import engine
from sstq_fl.fl.engine import RunConfig, Trainer, run
from sstq_fl.fl.trust import CURATOR_THREAT, Curator, Shuffler
from sstq_fl.fl.trust import SHUFFLER_THREAT as THREAT_MODEL
from sstq_fl.privacy.ldp import shuffled_epsilon
from tests.fl.test_resume_transcript import stopped_after

CFG: dict[str, Any] = dict(task="lsq", dim=8, n=400, clients=40, batch=10, clip=1.0, lr=0.5, rounds=4,
                           encoder="sstq-flat:b=4", epsilon=2.0)


def test_central_epsilon_is_reported_beside_the_local_one(tmp_path):
    m = run(RunConfig(**CFG, trust="shuffler"), tmp_path / "s", progress=False)
    f = m["final"]
    central = f["epsilon_central"]
    assert central["threat_model"] == THREAT_MODEL and "identified" in f["epsilon_threat_model"]
    assert central["epsilon"] == pytest.approx(shuffled_epsilon(2.0, 40, 4, 1e-5))
    assert central["epsilon"] < f["epsilon_total"] - 1  # 40 messages a round: 7.74 against 8
    assert [r["messages_central"] for r in m["rounds"]] == [40] * 4
    assert all(r["epsilon_central"] <= r["epsilon_spent"] for r in m["rounds"])
    transcript = tmp_path / "s" / "transcript_central.jsonl"
    assert main(["privacy", "replay", str(transcript)]) == 0
    assert central["binding"]["epsilon"] == pytest.approx(central["epsilon"])


def test_the_decoder_sees_a_permutation_of_the_messages_and_no_senders(tmp_path, monkeypatch):
    """What reaches the decoder: the round's bytes, reordered (not the clients' order), the same multiset;
    a rejected message is named by its shuffled position, never by a client."""
    seen: list[list[bytes]] = []
    real = engine.decode_mean

    def spy(enc, blobs, *a, **k):
        seen.append(list(blobs))
        return real(enc, blobs, *a, **k)

    monkeypatch.setattr(engine, "decode_mean", spy)
    tr = Trainer(RunConfig(**CFG, trust="shuffler"))
    sent: list[list[bytes]] = []
    real_messages = tr.client_messages

    def keep(theta, t, ids):
        blobs, stats = real_messages(theta, t, ids)
        sent.append(list(blobs))
        return blobs, stats

    tr.client_messages = keep  # type: ignore[method-assign]
    tr.train(tmp_path / "p", progress=False)
    rounds = [s for s in seen if len(s) == CFG["clients"]][-CFG["rounds"]:]
    assert len(rounds) == CFG["rounds"]
    for got, want in zip(rounds, sent[-CFG["rounds"]:]):
        assert sorted(got) == sorted(want) and got != want


def test_the_mean_does_not_depend_on_the_order(tmp_path):
    a = run(RunConfig(**CFG), tmp_path / "a", progress=False)
    b = run(RunConfig(**CFG, trust="shuffler"), tmp_path / "b", progress=False)
    assert b["final"]["distance_to_optimum"] == pytest.approx(a["final"]["distance_to_optimum"], rel=1e-5)
    assert b["final"]["epsilon_total"] == a["final"]["epsilon_total"]


def test_secure_permutations_come_from_the_os_and_reproducible_ones_from_the_seed():
    rep = Shuffler(1.0, 7, "reproducible", "r")
    assert (rep.permutation(50, 3) == Shuffler(1.0, 7, "reproducible", "r").permutation(50, 3)).all()
    assert not (rep.permutation(50, 3) == rep.permutation(50, 4)).all()
    sec = Shuffler(1.0, 7, "secure", "s")
    perms = {tuple(sec.permutation(50, 3)) for _ in range(5)}
    assert len(perms) == 5 and all(sorted(p) == list(range(50)) for p in perms)


def test_a_resumed_run_reports_the_same_central_epsilon(tmp_path):
    ref = run(RunConfig(**CFG, trust="shuffler"), tmp_path / "ref", progress=False)
    stopped_after(tmp_path / "k", after=2, **CFG, trust="shuffler")
    got = run(RunConfig(**CFG, trust="shuffler"), tmp_path / "k", resume=True, progress=False)
    assert got["final"]["epsilon_central"]["epsilon"] == ref["final"]["epsilon_central"]["epsilon"]
    assert [r["epsilon_central"] for r in got["rounds"]] == [r["epsilon_central"] for r in ref["rounds"]]


def test_refusals_are_one_line(tmp_path, capsys):
    with pytest.raises(ValueError, match="vectorized engine only"):
        RunConfig(**CFG, trust="shuffler", engine="flower")
    with pytest.raises(SystemExit) as exc:
        main(["run", "--task", "lsq", "--trust", "nobody", "--out", str(tmp_path / "x")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trust" in err
    assert not Path(tmp_path / "x").exists()


def test_a_curve_for_each_guarantee(tmp_path):
    run(RunConfig(**CFG, trust="shuffler"), tmp_path / "c", progress=False)
    m = json.loads((tmp_path / "c" / "metrics.json").read_text())
    from sstq_fl.plots import plot_run

    fig = plot_run(m, tmp_path / "c.png")
    labels = [ln.get_label() for ln in fig.axes[2].get_lines()]
    assert any("central (trusted stage" in s for s in labels)
    assert "trust shuffler" in fig.get_suptitle()
    assert np.isfinite([r["epsilon_central"] for r in m["rounds"]]).all()


# ---------------------------------------------------------------------- the curator (central-DP reference)

def test_curator_noise_meets_its_target_and_is_replayable(tmp_path):
    cfg = {**CFG, "encoder": "clean", "trust": "curator", "central_epsilon": 2.0}
    m = run(RunConfig(**cfg), tmp_path / "c", progress=False)
    central = m["final"]["epsilon_central"]
    assert 1.99 <= central["epsilon"] <= 2.0 and central["threat_model"] == CURATOR_THREAT
    assert m["final"]["epsilon_total"] is None or m["final"]["epsilon_total"] == float("inf")  # against the curator
    assert main(["privacy", "replay", str(tmp_path / "c" / "transcript_central.jsonl")]) == 0
    clean = run(RunConfig(**{**CFG, "encoder": "clean"}), tmp_path / "n", progress=False)
    assert m["final"]["distance_to_optimum"] != clean["final"]["distance_to_optimum"]


@pytest.mark.parametrize("randomness", ["reproducible", "secure"])
def test_curator_noise_has_the_declared_law(randomness):
    import torch

    cur = Curator(2.0, 4, 1e-5, clip=0.5, seed=3, randomness=randomness, run_id="x")
    zero = torch.zeros(20_000, dtype=torch.float64)
    noise = torch.cat([cur.noisy(zero, 10, t) for t in range(1, 6)]).numpy()
    std = cur.sigma * 0.5 * (1 + 1e-5) / 10
    assert abs(noise.mean()) < 5 * std / np.sqrt(noise.size)
    assert noise.std() == pytest.approx(std, rel=0.01)


def test_curator_refusals():
    with pytest.raises(ValueError, match="encoder clean"):
        RunConfig(**{**CFG, "trust": "curator", "central_epsilon": 1.0})
    with pytest.raises(ValueError, match="central-epsilon"):
        RunConfig(**{**CFG, "encoder": "clean", "trust": "curator"})
    with pytest.raises(ValueError, match="central-epsilon"):
        RunConfig(**{**CFG, "central_epsilon": 1.0})
