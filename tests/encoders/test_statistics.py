"""Unbiasedness against the declared variance, declared vs measured MSE, and the ε → ∞ limits."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from sstq_fl.encoders import make_encoder

from ..conftest import unit_rows

D, R, EPS = 24, 0.5, 2.0
UNBIASED = ["vqsgd", "sqkr", "sqkr:coin=public", "privunit", "sstq-flat:b=3", "sstq-flat:b=4,codebook=optimized",
            "sstq-flat:b=2,frame=haar", "sstq-flat:b=3,kashin=ap,level=1.9"]


def encode_many(spec, x, n, eps=EPS, seed0=0):
    enc = make_encoder(spec, x.shape[0], eps, radius=R)
    seeds = np.arange(seed0, seed0 + n)
    msgs = enc.encode(x.repeat(n, 1), seeds, coins=seeds + 777)
    return enc, enc.decode(msgs, coins=seeds + 777)


@pytest.mark.parametrize("spec", UNBIASED)
def test_unbiased_within_bonferroni_interval(spec):
    x = unit_rows(1, D, seed=5, norm=0.8 * R)[0]
    n = 40000
    enc, est = encode_many(spec, x, n)
    mean = est.mean(0)
    declared = enc.mse(x[None])
    var = float(declared[0]) if declared is not None else float(((est - x) ** 2).sum(1).mean())
    # Var(x̂_i) <= E‖x̂ − x‖² for every coordinate: a conservative per-coordinate interval
    z = stats.norm.isf(0.001 / (2 * D))
    assert ((mean - x).abs() <= z * math.sqrt(max(var, 1e-30) / n) + 1e-12).all()
    if var > 1e-20:  # E‖mean − x‖² = MSE / n exactly; the statistic concentrates near 1
        ratio = float(((mean - x) ** 2).sum()) * n / var
        assert 0.3 < ratio < 2.5, ratio


@pytest.mark.parametrize("spec", ["vqsgd", "privunit", "sstq-flat:b=3", "sstq-flat:b=5,codebook=optimized",
                                  "sstq-ma:b=3", "sstq-ma:b=6,law=kashin", "sstq-flat:b=2,frame=haar"])
def test_declared_mse_matches_measured(spec):
    x = unit_rows(1, D, seed=6, norm=0.6 * R)[0]
    n = 40000
    enc, est = encode_many(spec, x, n)
    err = ((est - x) ** 2).sum(1)
    declared = float(enc.mse(x[None])[0])
    se = float(err.std()) / math.sqrt(n)
    assert abs(float(err.mean()) - declared) <= 4 * se + 1e-9 * declared


def test_metric_aware_is_biased_but_bounded():
    x = unit_rows(1, D, seed=7, norm=R)[0]
    enc, est = encode_many("sstq-ma:b=4,decode=identity", x, 20000)
    bias = float(torch.linalg.vector_norm(est.mean(0) - x))
    assert bias > 0.05 * R and bias <= R + 1e-9  # shrinkage toward 0, never beyond ‖x‖


def test_large_epsilon_leaves_only_quantization_and_sampling_variance():
    x = unit_rows(1, D, seed=8, norm=R)[0]
    enc = make_encoder("sstq-flat:b=4", D, 30.0, radius=R)
    assert enc.p == pytest.approx(1.0) and enc.q < 1e-13
    s = enc._full_coefficients(x[None])
    k, w0, w1 = enc.rounding_moments(s)
    c = enc.code
    no_noise = (enc.bound**2 * (w0 * c[k] ** 2 + w1 * c[k + 1] ** 2) * enc.frame.row_sq_norms()).sum() - R**2
    assert float(enc.mse(x[None])[0]) == pytest.approx(float(no_noise), rel=1e-9)
    vq = make_encoder("vqsgd", D, 30.0, radius=R)
    assert float(vq.mse(x[None])[0]) == pytest.approx(R**2 * D - R**2, rel=1e-9)
    _, est = encode_many("sstq-flat:b=4", x, 20000, eps=30.0)
    assert float(((est - x) ** 2).sum(1).mean()) == pytest.approx(float(no_noise), rel=0.05)


def test_mse_shape_vqsgd_cubic_sstq_linear():
    eps, norm = 3.0, 0.2
    ratios = {}
    for spec in ["vqsgd", "sstq-flat:b=8", "privunit"]:
        m = [float(make_encoder(spec, d, eps, radius=norm).mse(unit_rows(1, d, norm=norm))[0]) for d in (100, 1000)]
        ratios[spec] = m[1] / m[0]
    assert 500 < ratios["vqsgd"] < 1500  # ~ d^3 (x10 in d)
    assert 5 < ratios["sstq-flat:b=8"] < 20 and 5 < ratios["privunit"] < 20  # ~ d


def test_aggregate_equals_mean_of_decoded_and_merges():
    x = unit_rows(30, D, seed=9, norm=R)
    for spec in ["sstq-flat", "sstq-ma", "sqkr", "vqsgd", "privunit", "clean"]:
        enc = make_encoder(spec, D, EPS, radius=R)
        msgs = enc.encode(x, np.arange(30))
        full = enc.aggregate(msgs)
        assert torch.allclose(full, enc.decode(msgs).mean(0), atol=1e-10)
        a, b = enc.accumulator(), enc.accumulator()
        a.add(msgs.select(list(range(10))))
        b.add(msgs.select(list(range(10, 30))))
        a.merge(b)
        assert torch.allclose(a.result(), full, atol=1e-10)
