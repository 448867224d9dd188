import math

import numpy as np
import pytest
import torch

from sstq_fl.encoders.maths import codebooks as cb

SLOW_SOLVES = {(1.0, 256), (8.0, 256)}  # 20 and 31 s on 2 cores; m = 256 stays in CI at eps = 0.5 and 3


@pytest.mark.parametrize("eps,m", [pytest.param(e, m, marks=[pytest.mark.slow] if (e, m) in SLOW_SOLVES else [])
                                   for m in (2, 4, 16, 256) for e in (0.5, 1.0, 3.0, 8.0)])
def test_flat_optimized_is_feasible_and_kkt_optimal(eps, m):
    c = cb.flat_optimized(eps, m)
    assert c[0] == -1 and c[-1] == 1 and abs(c.sum()) < 1e-12
    assert (np.diff(c) >= 0).all()
    if m > 2:
        assert cb.flat_kkt_residual(c, eps) < 1e-5
    assert cb.flat_objective(c, eps) <= cb.flat_objective(cb.uniform(m), eps) + 1e-12


def test_flat_optimum_beats_random_feasible_perturbations(rs):
    eps, m = 3.0, 16
    c = cb.flat_optimized(eps, m)
    best = cb.flat_objective(c, eps)
    for _ in range(200):
        gaps = np.diff(c) + rs.normal(0, 0.01, m - 1)
        gaps = np.clip(gaps, 0, None)
        cand = np.concatenate([[-1.0], -1.0 + np.cumsum(gaps / gaps.sum() * 2)])
        cand = 0.5 * (cand - cand[::-1])  # symmetric => sum zero
        assert cb.flat_objective(cand, eps) >= best - 1e-12


def test_flat_optimum_turns_4_to_the_b_into_2_to_the_b():
    eps = 3.0

    def worst_second_moment(c: np.ndarray) -> float:  # max_V E[ŝ²]/B² of the flat channel
        m = len(c)
        p, q = math.exp(eps) / (math.exp(eps) + m - 1), 1 / (math.exp(eps) + m - 1)
        return float((c**2).max() / (p - q) + q * (c**2).sum() / (p - q) ** 2)

    # two more bits (64 -> 256): ~4^2 = 16x for the uniform grid, ~2^2 = 4x optimized
    uni = worst_second_moment(cb.uniform(256)) / worst_second_moment(cb.uniform(64))
    opt = worst_second_moment(cb.flat_optimized(eps, 256)) / worst_second_moment(cb.flat_optimized(eps, 64))
    assert uni > 6 and opt < 4.5


@pytest.mark.parametrize("eps", [0.5, 3.0, 10.0])
def test_ma_channel_rows_and_exact_ratio(eps):
    for c in (cb.uniform(16), cb.metric_aware(eps, 16)):
        p = cb.ma_transition(c, eps)
        assert torch.allclose(p.sum(1), torch.ones(16, dtype=torch.float64))
        ratio = (p[:, None, :] / p[None, :, :]).max()
        assert ratio <= math.exp(eps) * (1 + 1e-9)


def test_ma_codebook_not_worse_than_uniform_and_panter_dite_limit():
    for law in ("uniform", "kashin"):
        c = torch.tensor(cb.metric_aware(3.0, 16, law))
        assert cb.ma_expected_error(c, 3.0, law) <= cb.ma_expected_error(torch.tensor(cb.uniform(16)), 3.0, law) + 1e-12
    c = cb.metric_aware(400.0, 16, "kashin")  # near-noiseless: density ∝ f^(1/3), finer near 0
    gaps = np.diff(c)
    assert gaps[7] < gaps[0] * 0.8
    assert np.allclose(cb.metric_aware(400.0, 8, "uniform"), cb.uniform(8), atol=0.02)


def test_invalid_codebook_parameters():
    with pytest.raises(ValueError, match="M"):
        cb.flat_optimized(3.0, 1)
    with pytest.raises(ValueError, match="epsilon"):
        cb.flat_optimized(0.0, 4)
    with pytest.raises(ValueError, match="law"):
        cb.law_density("cauchy", torch.zeros(1), 2.0)
