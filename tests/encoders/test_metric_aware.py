"""Metric-aware SSTQ: the calibrated scale, the authors' scale (``scale=paper``) and the gain decoder."""

import math

import pytest
import torch

from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.maths import codebooks as cb

from ..conftest import unit_rows
from .test_statistics import D, R, encode_many


@pytest.mark.parametrize("spec", ["sstq-ma:b=3,scale=paper,decode=identity", "sstq-ma:b=4,decode=identity",
                                  "sstq-ma:b=3,scale=paper"])
def test_declared_mse_matches_measured(spec):
    """``mse`` is exact for either scale and either decoder (bias included)."""
    x = unit_rows(1, D, seed=6, norm=0.6 * R)[0]
    n = 40000
    enc, est = encode_many(spec, x, n)
    err = ((est - x) ** 2).sum(1)
    se = float(err.std()) / math.sqrt(n)
    assert abs(float(err.mean()) - float(enc.mse(x[None])[0])) <= 4 * se


def test_gain_decoder_removes_most_of_the_shrinkage():
    """Identity decoding shrinks the mean to about κ x (κ ≈ 0.5 at ε = 2); dividing by κ leaves a bias
    at most a fifth of the identity decoder's (measured from the exact mean, no sampling)."""
    x = unit_rows(1, D, seed=7, norm=R)[0][None]
    bias = {}
    for dec in ("identity", "gain"):
        enc = make_encoder(f"sstq-ma:b=4,decode={dec}", D, 2.0, radius=R)
        s = enc._full_coefficients(x)
        k, w0, w1 = enc.rounding_moments(s)
        mean = enc.frame.synth_((enc.bound * (w0 * (enc.P[k] @ enc.values) + w1 * (enc.P[k + 1] @ enc.values))).contiguous())
        bias[dec] = float(torch.linalg.vector_norm(mean - enc.preprocess(x)))
    assert 0.3 < enc.gain < 0.7
    assert bias["identity"] > 0.3 * R and bias["gain"] < 0.2 * bias["identity"]


def test_calibrated_scale_is_the_exact_root():
    """Bisection lands on the exact worst log-ratio ε (the channel's pure-LDP ε), and refuses nothing."""
    c = cb.metric_aware(3.0, 16, scale="exact")
    s = cb.calibrated_scale(c, 3.0)
    assert cb.ma_worst_log_ratio(c, s) == pytest.approx(3.0, rel=1e-11)
    assert cb.ma_worst_log_ratio(c, s) <= 3.0
    assert cb.ma_worst_log_ratio(c, s * (1 - 1e-6)) > 3.0  # any less noise would break ε
    with pytest.raises(ValueError, match="scale"):
        cb.metric_aware(3.0, 16, scale="tight")
