"""The DP-MEPF release's replace-one sensitivity Δ = max(√(2(1+m)), 2√m) and its declaration to the runner."""

import math

import numpy as np
import pytest
import torch

from sstq_fl.data.workload import WorkloadData
from sstq_fl.gen.mepf import features as mepf
from sstq_fl.gen.runner import DPRunner, InProcessPool
from sstq_fl.privacy.events import GaussianEvent

K = 10


def _contribution(y: int, phi: np.ndarray, m: int) -> np.ndarray:
    """The record's joint vector (counts, per-class sums) through the real ``class_sums``."""
    counts, sums = mepf.class_sums(torch.as_tensor(phi[None]), torch.tensor([y]), K, (1, 2)[:m])
    return np.concatenate([counts.numpy(), sums.numpy().ravel()])


def _unit_blocks(rs: np.random.Generator, m: int, d: int) -> np.ndarray:
    b = rs.standard_normal((m, d))
    return (b / np.linalg.norm(b, axis=1, keepdims=True)).ravel()


@pytest.mark.parametrize("m", [1, 2])
def test_sensitivity_values_and_adversarial_pairs_attain_it(m):
    moments = (1, 2)[:m]
    delta = mepf.replace_one_sensitivity(moments)
    assert delta == pytest.approx(max(math.sqrt(2 * (1 + m)), 2 * math.sqrt(m)))
    assert delta < 2 * mepf.contribution_bound(moments)  # tighter than the triangle inequality's 2b
    phi = _unit_blocks(np.random.default_rng(m), m, 16)
    same = np.linalg.norm(_contribution(3, phi, m) - _contribution(3, -phi, m))
    other = np.linalg.norm(_contribution(3, phi, m) - _contribution(5, phi, m))
    assert same == pytest.approx(2 * math.sqrt(m)) and other == pytest.approx(math.sqrt(2 * (1 + m)))
    assert max(same, other) == pytest.approx(delta)


@pytest.mark.parametrize("m", [1, 2])
def test_random_pairs_never_exceed_the_sensitivity(m):
    rs, delta = np.random.default_rng(10 + m), mepf.replace_one_sensitivity((1, 2)[:m])
    worst = 0.0
    for _ in range(2000):
        a, b = _unit_blocks(rs, m, 8), _unit_blocks(rs, m, 8)
        b *= rs.uniform(0, 1)  # shorter moments (clipped or zero features) too
        ya, yb = rs.integers(0, K, 2)
        worst = max(worst, float(np.linalg.norm(_contribution(ya, a, m) - _contribution(yb, b, m))))
    assert worst <= delta + 1e-12


@pytest.mark.parametrize("moments", [(1,), (1, 2)])
def test_brute_force_over_real_contributions(moments):
    """Every pair of real records' contributions (Φ of synthetic digits, embedded as the clients do)."""
    x, y = WorkloadData(dataset="synthetic", records=40, seed=2).client_records(0)
    fx = mepf.build_feature_extractor("cpu", seed=0)
    emb = mepf.embed(fx, x, moments).double()
    rows = []
    for i in range(len(y)):
        c, s = mepf.class_sums(emb[i : i + 1], torch.as_tensor(y[i : i + 1]), K, moments)
        rows.append(torch.cat([c, s.ravel()]))
    v = torch.stack(rows)
    worst = float(torch.cdist(v, v).max())
    delta = mepf.replace_one_sensitivity(moments)
    assert worst <= delta + 1e-9 and worst > 0.5 * delta


def test_declared_sensitivity_sets_the_noise_std_and_is_recorded():
    data = WorkloadData(dataset="synthetic", clients=2, records=200, seed=0)
    run = DPRunner(InProcessPool(data), "t", "replace_one", randomness="reproducible")
    bound, delta, sigma = math.sqrt(2), mepf.replace_one_sensitivity((1,)), 3.0
    run.additive_release("s", "stats.class_sums", {}, {}, bound, sigma, sensitivity=delta)
    [e] = run.ledger.entries
    assert e.event == GaussianEvent(sigma) and e.meta["sensitivity"] == 2.0 and e.meta["std"] == pytest.approx(sigma)
    old = DPRunner(InProcessPool(data), "t", "replace_one", randomness="reproducible")
    old.additive_release("s", "stats.class_sums", {}, {}, bound, sigma)
    assert old.ledger.entries[0].meta["std"] == pytest.approx(sigma * math.sqrt(2))  # the generic 2b shift
    assert old.ledger.entries[0].meta["sensitivity"] == pytest.approx(2 * bound)
    with pytest.raises(ValueError, match="sensitivity must be in"):
        run.additive_release("s", "stats.class_sums", {}, {}, bound, sigma, sensitivity=2 * bound + 0.1)
    with pytest.raises(ValueError, match="replace-one shift"):
        DPRunner(InProcessPool(data), "t", "add_or_remove_one").additive_release(
            "s", "stats.class_sums", {}, {}, bound, sigma, sensitivity=delta)
