"""privunitg: calibration against the authors' grid, exact sampling of ``t``, unbiasedness and the declared MSE,
the cap coin behind the ε argument, wire refusals, batching and the conformance kit.

PrivUnitG is Asi, Feldman & Talwar, ICML 2022; the reference numbers below come from the authors' code
(apple/ml-projunit, NeurIPS 2023), recorded as constants.
"""

import math

import numpy as np
import pytest
import torch

from sstq_fl import wire
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.base import WireError
from sstq_fl.encoders.privunitg import HALF_ULP, calibrate, gamma_sigma, norm_bound, sample_t
from sstq_fl.testing import check_encoder
from sstq_fl.testing.wirecheck import forge

from ..conftest import unit_rows

AUTHORS_GRID = {  # eps: (p, gamma, sigma) from their priv_unit_G_get_p(eps) and get_gamma_sigma(p, eps)
    1.0: (0.59, 0.3957534300986853, 2.5159610697539616),
    2.0: (0.67, 0.7873251633133579, 1.271488191411111),
    4.0: (0.79, 1.5183724387688282, 0.6597907742926721),
    8.0: (0.9, 2.7466817770131753, 0.3645742378378119),
}

AUTHORS_MSE = (111.45600676961998, 0.22157959677863728)
"""Mean and standard error of ``‖x̂ − x‖²`` over 2000 calls of the authors' ``privatize_vector(x, 4, 0,
'PrivUnitG', p, γ, σ)`` (their grid calibration), ``x`` the unit vector of ``default_rng(7).standard_normal(256)``,
after ``np.random.seed(0); random.seed(0)`` (numpy 2.4, commit 166f449 of apple/ml-projunit)."""


@pytest.mark.parametrize("dim,eps,radius,trials", [(6, 1.0, 1.0, 20000), (5, 4.0, 0.7, 8000), (1, 0.5, 2.0, 8000)])
def test_conformance_kit_passes(dim, eps, radius, trials):
    report = check_encoder("privunitg", dim=dim, epsilon=eps, radius=radius, trials=trials, audit_trials=trials)
    assert report.passed, str(report)


@pytest.mark.parametrize("eps", sorted(AUTHORS_GRID))
def test_calibration_reproduces_the_authors_and_beats_their_grid(eps):
    p, gamma, sigma = AUTHORS_GRID[eps]
    g, s = gamma_sigma(p, eps)
    assert g == pytest.approx(gamma, rel=1e-9) and s == pytest.approx(sigma, rel=1e-9)
    cal = calibrate(eps)
    assert cal.sigma <= sigma and abs(cal.p - p) <= 0.01
    assert cal.exact_epsilon() == pytest.approx(eps, rel=1e-12)
    for q in np.linspace(0.01, 0.99, 99):  # the optimum beats every grid point, the authors' included
        assert cal.sigma <= gamma_sigma(float(q), eps)[1] * (1 + 1e-12)
    for step in (1e-4, -1e-4):
        assert cal.sigma <= gamma_sigma(cal.p + step, eps)[1]


@pytest.mark.parametrize("eps", [1e-12, 1e-3, 0.5, 3.0, 12.0, 30.0])
def test_calibration_is_exact_across_epsilon(eps):
    cal = calibrate(eps)
    assert 0 < cal.p < 1 and cal.sigma > 0 and math.isfinite(cal.gamma)
    assert cal.exact_epsilon() <= eps * (1 + 1e-9) and cal.exact_epsilon() == pytest.approx(eps, rel=1e-6)
    mean = math.exp(-cal.gamma**2 / 2) / math.sqrt(2 * math.pi) * (-math.expm1(-eps)) * cal.p / math.exp(cal.log_q)
    assert 1 / cal.sigma == pytest.approx(mean, rel=1e-12)


def test_t_sampler_is_the_exact_inverse_cdf():
    from scipy import stats
    cal = calibrate(2.0)
    level = (np.arange(4000) + 0.5) / 4000
    above = sample_t(cal, np.stack([np.zeros_like(level), level], 1))
    below = sample_t(cal, np.stack([np.ones_like(level), level], 1))
    q = math.exp(cal.log_q)
    assert (above >= cal.gamma).all() and (below < cal.gamma).all()
    assert np.allclose(stats.norm.sf(above), q * level, rtol=1e-10)
    assert np.allclose(stats.norm.cdf(below), stats.norm.cdf(cal.gamma) * level, rtol=1e-10)
    extremes = sample_t(cal, np.array([[0.0, 0.0], [0.0, 1 - 2.0**-53], [0.99, 0.0], [0.99, 1 - 2.0**-53]]))
    assert np.isfinite(extremes).all() and extremes[1] >= cal.gamma > extremes[3]
    assert HALF_ULP == 2.0**-54


def test_moments_of_t_match_the_truncated_normal_formulas():
    cal = calibrate(1.5)
    coin = np.random.default_rng(0).random((400000, 2))
    t = sample_t(cal, coin)
    assert t.mean() == pytest.approx(1 / cal.sigma, abs=5 * t.std() / math.sqrt(t.size))
    assert (t**2).mean() == pytest.approx(cal.second_moment, abs=5 * (t**2).std() / math.sqrt(t.size))


def test_unbiased_and_mse_equals_the_declared_formula():
    d, n, radius = 16, 40000, 0.7
    enc = make_encoder("privunitg", d, 2.0, radius=radius)
    x = unit_rows(1, d, seed=5, norm=0.4)[0]
    est = enc.decode(enc.encode(x.repeat(n, 1), np.arange(n)))
    err = ((est - x) ** 2).sum(1)
    declared = float(enc.mse(x[None])[0])
    cal = enc.cal
    assert declared == pytest.approx(radius**2 * cal.sigma**2 * (d - 1 + cal.second_moment) - 0.16, rel=1e-12)
    assert abs(float(err.mean()) - declared) <= 4 * float(err.std()) / math.sqrt(n)
    z = (est.mean(0) - x).abs() / (est.std(0) / math.sqrt(n))
    assert float(z.max()) < 4.5


def test_cap_coin_behind_the_epsilon_argument():
    """``P(⟨x̂, ±u⟩ ≥ Rσγ) = p`` for the kept direction: the output density is ``p/q`` on the cap, ``(1−p)/(1−q)``
    off it, so the ratio for two inputs is at most ``e^ε``."""
    d, n, radius = 12, 40000, 0.5
    enc = make_encoder("privunitg", d, 3.0, radius=radius)
    x = unit_rows(1, d, seed=2, norm=radius)[0]  # on the sphere: never flipped
    v = enc.decode(enc.encode(x.repeat(n, 1), np.arange(n)))
    frac = float(((v @ (x / radius)) >= radius * enc.cal.sigma * enc.cal.gamma).double().mean())
    assert abs(frac - enc.cal.p) <= 5 * math.sqrt(enc.cal.p * (1 - enc.cal.p) / n)
    assert math.log(enc.cal.p / (1 - enc.cal.p)) - math.log(math.exp(enc.cal.log_q) / -math.expm1(enc.cal.log_q)) \
        == pytest.approx(3.0, rel=1e-9)


def test_authors_monte_carlo_mse_is_matched():
    d, n = 256, 2000
    g = np.random.default_rng(7).standard_normal(d)
    x = torch.from_numpy(g / np.linalg.norm(g))
    enc = make_encoder("privunitg", d, 4.0)
    err = ((enc.decode(enc.encode(x.repeat(n, 1), np.arange(n))) - x) ** 2).sum(1)
    mean, se = AUTHORS_MSE
    assert abs(float(err.mean()) - mean) <= 4 * math.hypot(se, float(err.std()) / math.sqrt(n))
    assert abs(float(enc.mse(x[None])[0]) - mean) <= 4 * se


def test_bits_and_round_trip():
    d = 1000
    enc = make_encoder("privunitg", d, 3.0)
    assert enc.payload_bits() == enc.formula_bits() == 32 * d
    msgs = enc.encode(unit_rows(5, d, seed=2).float(), np.arange(5))
    blobs = wire.pack(enc, msgs, round=3)
    assert all(len(b) - wire.HEADER_BYTES == 4 * d for b in blobs)
    assert torch.equal(enc.decode(wire.unpack(enc, blobs, round=3)), enc.decode(msgs))


def test_wire_refuses_too_long_and_non_finite_messages():
    d = 8
    enc = make_encoder("privunitg", d, 1.0, radius=0.5)
    msgs = enc.encode(unit_rows(4, d, seed=1), np.arange(4))
    v = msgs.fields["v"][0].numpy()
    assert enc.bound == pytest.approx(0.5 * norm_bound(enc.cal, d))
    longest = v / np.linalg.norm(v) * enc.bound * (1 - 1e-6)
    wire.unpack(enc, [forge(enc, {"v": longest})], round=3)  # as long as an honest message can be: accepted
    for bad in (v / np.linalg.norm(v) * enc.bound * 1.01, np.full(d, 3e38, np.float32), np.where(np.arange(d) == 2, np.nan, v)):
        with pytest.raises(WireError):
            wire.unpack(enc, [forge(enc, {"v": bad})], round=3)
    with pytest.raises(WireError, match="truncated"):
        wire.unpack(enc, [wire.pack(enc, msgs, round=3)[0][:-4]], round=3)


def test_batch_equals_one_at_a_time_across_chunks(monkeypatch):
    d = 300
    enc = make_encoder("privunitg", d, 2.0)
    monkeypatch.setattr(type(enc), "CHUNK_ELEMENTS", 3 * d)  # three rows per chunk
    x = unit_rows(8, d, seed=4)
    x[2] = 0.0
    x[5] *= 1e-3
    seeds = np.array([11, 3, 99, 5, 0, 7, 2**40, 8], dtype=np.uint64)
    batch = enc.encode(x, seeds)
    for i in range(8):
        assert torch.equal(enc.encode(x[i : i + 1], seeds[i : i + 1]).fields["v"][0], batch.fields["v"][i])
    assert torch.isfinite(batch.fields["v"]).all()


def test_bad_epsilon_and_parameters_are_one_line_errors():
    for eps in (31.0, 0.0):
        with pytest.raises(ValueError, match="epsilon") as exc:
            make_encoder("privunitg", 10, eps)
        assert "\n" not in str(exc.value)
    with pytest.raises(ValueError, match="no parameter"):
        make_encoder("privunitg:k=3", 10, 1.0)
    assert make_encoder("privunitg", 10, 30.0).cal.exact_epsilon() <= 30.0 * (1 + 1e-9)
