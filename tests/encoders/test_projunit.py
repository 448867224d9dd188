"""projunit (ProjUnit / FastProjUnit, Asi, Feldman, Nelson, Nguyen & Talwar, NeurIPS 2023): projections, the exact
bias factor and MSE of the dense (Haar) variant, PrivUnitG on the normalised projection, shared randomness, wire,
batching, parameters and the conformance kit.  Reference numbers from the authors' code are recorded as constants.
"""

import math

import numpy as np
import pytest
import torch

from sstq_fl import wire
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.base import WireError
from sstq_fl.encoders.projunit import DenseProjection, SrhtProjection, bias_factor, padded_dim
from sstq_fl.encoders.seeded import public_seeds
from sstq_fl.testing import check_encoder
from sstq_fl.testing.wirecheck import forge

from ..conftest import unit_rows

AUTHORS_MSE = {  # spec, d, eps: (mean, standard error) of ‖x̂ − x‖² over 2000 calls of their privatize_vector
    ("projunit:k=16,transform=dense", 128, 2.0): (213.5466552461685, 1.629887958402382),
    ("projunit:k=32,transform=srht", 256, 4.0): (118.3908391754315, 0.6433696587175975),
}
"""The authors' ``privatize_vector(x, eps, k, 'ProjUnit' / 'FastProjUnit', p, γ, σ)`` with their grid calibration,
``x`` the unit vector of ``default_rng(7).standard_normal(d)``, after ``np.random.seed(0); random.seed(0)`` (numpy
2.4, commit 166f449 of apple/ml-projunit)."""


@pytest.mark.parametrize("spec", ["projunit:k=3", "projunit:k=3,transform=srht", "projunit:k=3,coin=message",
                                  "projunit:k=3,coin=public", "projunit:k=3,transform=srht,coin=public"])
def test_conformance_kit_passes(spec):
    report = check_encoder(spec, dim=6, epsilon=1.0)
    assert report.passed, str(report)


@pytest.mark.parametrize("spec", ["projunit:k=2", "projunit:k=4,transform=srht", "projunit:k=5,seed_bits=8"])
def test_conformance_kit_passes_at_other_epsilons_and_dims(spec):
    report = check_encoder(spec, dim=5, epsilon=4.0, radius=0.7, trials=8000, audit_trials=8000)
    assert report.passed, str(report)


def explicit_srht(proj, wseed):
    """``W = S H D / √k`` (``k × P``, ``H`` Sylvester–Hadamard) built entry by entry."""
    from scipy.linalg import hadamard
    signs, rows = proj.parts(np.array([wseed], dtype=np.uint64))
    return hadamard(proj.P)[rows[0].numpy()] * signs[0].numpy()[None, :] / math.sqrt(proj.k)


@pytest.mark.parametrize("d,k", [(8, 3), (6, 4), (37, 5)])
def test_projections_are_the_stated_matrices(d, k):
    rs = np.random.default_rng(d)
    u, y = torch.from_numpy(rs.standard_normal((1, d))), torch.from_numpy(rs.standard_normal((1, k)))
    srht, dense = SrhtProjection(d, k), DenseProjection(d, k)
    s = np.array([5], dtype=np.uint64)
    w = explicit_srht(srht, 5)[:, :d]
    assert torch.allclose(srht.forward(u, s)[0], torch.from_numpy(w @ u[0].numpy()), atol=1e-12)
    assert torch.allclose(srht.backward(y, s)[0], torch.from_numpy(w.T @ y[0].numpy()), atol=1e-12)
    assert np.allclose(explicit_srht(srht, 5) @ explicit_srht(srht, 5).T, padded_dim(d) / k * np.eye(k))
    q = dense.basis(s)[0]
    assert np.allclose(q.T @ q, np.eye(k), atol=1e-12)
    assert torch.allclose(dense.forward(u, s)[0], torch.from_numpy(math.sqrt(d / k) * q.T @ u[0].numpy()), atol=1e-12)
    assert float(dense.forward(u, s)[0] @ y[0]) == pytest.approx(float(u[0] @ dense.backward(y, s)[0]), rel=1e-12)


def test_bias_factor_formula_and_the_haar_row_space():
    from scipy import integrate, stats
    for d, k in [(12, 3), (100, 7), (1024, 100)]:
        integral = integrate.quad(lambda b, d=d, k=k: math.sqrt(b) * stats.beta.pdf(b, k / 2, (d - k) / 2), 0, 1)[0]
        assert bias_factor(d, k) == pytest.approx(math.sqrt(d / k) * integral, rel=1e-8)
    assert bias_factor(9, 9) == 1.0 and 0.9 < bias_factor(12, 3) < 1.0
    d, k, n = 12, 3, 40000  # the noiseless map W^T W u/‖W u‖, averaged over Haar W: c·u
    proj, u = DenseProjection(d, k), unit_rows(1, d, seed=3)
    s = np.arange(n, dtype=np.uint64)
    w = proj.forward(u.expand(n, -1).contiguous(), s)
    back = proj.backward(w / torch.linalg.vector_norm(w, dim=1, keepdim=True), s)
    se = back.std(0) / math.sqrt(n)
    assert float(((back.mean(0) - bias_factor(d, k) * u[0]).abs() / se).max()) < 4.5


@pytest.mark.parametrize("coin", ["public", "message"])
def test_dense_mse_equals_the_declared_formula(coin):
    d, k, n, radius = 24, 6, 30000, 0.7
    enc = make_encoder(f"projunit:k={k},coin={coin}", d, 2.0, radius=radius)
    x = unit_rows(1, d, seed=5, norm=0.5)[0]
    c = np.arange(n, dtype=np.uint64) + 17
    est = enc.decode(enc.encode(x.repeat(n, 1), np.arange(n), coins=c), coins=c)
    err = ((est - x) ** 2).sum(1)
    cal, cf = enc.cal, bias_factor(d, k)
    declared = float(enc.mse(x[None])[0])
    assert declared == pytest.approx(radius**2 * (d * cal.sigma**2 + d / k * cal.gamma * cal.sigma) - (2 * cf - 1) * 0.25)
    assert abs(float(err.mean()) - declared) <= 4 * float(err.std()) / math.sqrt(n)


def test_mse_is_declared_only_where_exact():
    assert make_encoder("projunit:k=3,transform=srht", 8, 1.0).mse(unit_rows(1, 8)) is None
    assert make_encoder("projunit:k=3,seed_bits=20", 8, 1.0).mse(unit_rows(1, 8)) is None
    assert make_encoder("projunit:k=3,seed_bits=32", 8, 1.0).mse(unit_rows(1, 8)) is not None


@pytest.mark.parametrize("transform", ["dense", "srht"])
def test_message_is_privunitg_of_the_normalised_projection(transform):
    """With the projection rebuilt from the public coins: ``P(⟨y, v⟩ ≥ Rσγ) = p`` for ``v = Wu/‖Wu‖`` (PrivUnitG's
    cap coin in ``R^k``, the density ratio behind ε), and ``E[y] = R v`` given ``W``."""
    d, k, n, radius = 40, 5, 30000, 0.6
    enc = make_encoder(f"projunit:k={k},transform={transform},coin=public", d, 2.0, radius=radius)
    x = unit_rows(1, d, seed=8, norm=radius)[0]  # on the sphere: never flipped
    coins = np.arange(n, dtype=np.uint64) + 3
    y = enc.encode(x.repeat(n, 1), np.arange(n), coins=coins).fields["v"].double()
    w = enc.proj.forward((x / radius).repeat(n, 1), public_seeds(enc, None, coins, n))
    v = w / torch.linalg.vector_norm(w, dim=1, keepdim=True)
    dots = (y * v).sum(1)
    frac = float((dots >= radius * enc.cal.sigma * enc.cal.gamma).double().mean())
    assert abs(frac - enc.cal.p) <= 5 * math.sqrt(enc.cal.p * (1 - enc.cal.p) / n)
    assert abs(float(dots.mean()) - radius) <= 5 * float(dots.std()) / math.sqrt(n)


@pytest.mark.parametrize("spec,d,eps", sorted(AUTHORS_MSE))
def test_authors_monte_carlo_mse_is_matched(spec, d, eps):
    n = 2000
    g = np.random.default_rng(7).standard_normal(d)
    x = torch.from_numpy(g / np.linalg.norm(g))
    enc = make_encoder(spec, d, eps)
    err = ((enc.decode(enc.encode(x.repeat(n, 1), np.arange(n))) - x) ** 2).sum(1)
    mean, se = AUTHORS_MSE[(spec, d, eps)]
    assert abs(float(err.mean()) - mean) <= 4 * math.hypot(se, float(err.std()) / math.sqrt(n))


@pytest.mark.parametrize("spec,bits", [("projunit:k=10", 32 * 10 + 32), ("projunit:k=10,seed_bits=12", 332),
                                       ("projunit:k=10,coin=public", 320), ("projunit:k=10,seed_bits=0", 320),
                                       ("projunit:k=7,transform=srht", 256)])
def test_bits_formula_and_round_trip(spec, bits):
    d = 50
    enc = make_encoder(spec, d, 3.0)
    assert enc.payload_bits() == enc.formula_bits() == bits == sum(f.total_bits for f in enc.layout())
    c = np.arange(4, dtype=np.uint64) + 9
    msgs = enc.encode(unit_rows(4, d, seed=2), np.arange(4), coins=c)
    blobs = wire.pack(enc, msgs, round=3)
    assert all(len(b) - wire.HEADER_BYTES == (bits + 7) // 8 for b in blobs)
    assert torch.equal(enc.decode(wire.unpack(enc, blobs, round=3), coins=c), enc.decode(msgs, coins=c))


def test_wire_refuses_too_long_and_non_finite_messages_and_accepts_any_seed():
    enc = make_encoder("projunit:k=4,seed_bits=6", 12, 1.0, radius=0.5)
    v = enc.encode(unit_rows(1, 12, seed=1), np.arange(1)).fields["v"][0].numpy()
    direction = v / np.linalg.norm(v)
    for s in (0, 63):
        est = enc.decode(wire.unpack(enc, [forge(enc, {"v": direction * enc.bound * (1 - 1e-6), "s": [s]})], round=3))
        assert torch.isfinite(est).all()
    for bad in (direction * enc.bound * 1.01, np.full(4, np.inf, np.float32)):
        with pytest.raises(WireError):
            wire.unpack(enc, [forge(enc, {"v": bad, "s": [0]})], round=3)


@pytest.mark.parametrize("spec", ["projunit:k=7", "projunit:k=7,transform=srht", "projunit:k=7,coin=public"])
def test_batch_equals_one_at_a_time_across_chunks(spec):
    d = 30
    enc = make_encoder(spec, d, 2.0)
    enc.proj.rows_per_chunk = 3
    x = unit_rows(8, d, seed=4)
    x[2], x[5] = 0.0, x[5] * 1e-3
    seeds = np.array([11, 3, 99, 5, 0, 7, 2**40, 8], dtype=np.uint64)
    batch = enc.encode(x, seeds, coins=seeds + 1)
    est = enc.decode(batch, coins=seeds + 1)
    for i in range(8):
        one = enc.encode(x[i : i + 1], seeds[i : i + 1], coins=seeds[i : i + 1] + 1)
        assert all(torch.equal(one.fields[k][0], v[i]) for k, v in batch.fields.items())
        assert torch.equal(enc.decode(one, coins=seeds[i : i + 1] + 1)[0], est[i])


def test_a_zero_projection_becomes_e1():
    enc = make_encoder("projunit:k=3,coin=public", 6, 1.0)
    enc.proj.forward = lambda u, s: torch.zeros(u.shape[0], 3, dtype=torch.float64)
    msgs = enc.encode(unit_rows(2000, 6, seed=1), np.arange(2000), coins=np.arange(2000))
    dots = msgs.fields["v"][:, 0].double()
    assert torch.isfinite(msgs.fields["v"]).all()
    assert float(dots.mean()) == pytest.approx(1.0, abs=5 * float(dots.std()) / math.sqrt(2000))


def test_k_defaults_to_the_authors_1000_capped_at_d():
    assert make_encoder("projunit", 7, 1.0).cfg["k"] == 7 and make_encoder("projunit", 7, 1.0).payload_bits() == 7 * 32 + 32
    assert make_encoder("projunit:transform=srht", 5000, 1.0).k == 1000
    enc = make_encoder("projunit", 7, 1.0)
    assert make_encoder(enc.spec, 7, 1.0).spec == enc.spec  # the canonical spec rebuilds the same encoder


@pytest.mark.parametrize("spec,words", [("projunit:k=9", "k must be at most d=8, got k=9"), ("projunit:k=0", "'k' must be >= 1"),
                                        ("projunit:transform=fft", "'transform' must be one of"),
                                        ("projunit:seed_bits=33", "'seed_bits' must be"), ("projunit:coin=private", "'coin'")])
def test_bad_parameters_are_one_line_errors(spec, words):
    with pytest.raises(ValueError, match=words) as exc:
        make_encoder(spec, 8, 1.0)
    assert "\n" not in str(exc.value)


def test_public_coin_needs_coins_and_epsilon_is_capped():
    enc = make_encoder("projunit:k=3,coin=public", 10, 1.0)
    assert enc.public_coins and not make_encoder("projunit:k=3", 10, 1.0).public_coins
    with pytest.raises(ValueError, match="coins"):
        enc.encode(unit_rows(1, 10), [0])
    with pytest.raises(ValueError, match="epsilon"):
        make_encoder("projunit:k=3", 10, 31.0)


@pytest.mark.slow
def test_fastprojunit_at_the_fmnist_dimension():
    d, n = 25450, 400
    enc = make_encoder("projunit:transform=srht", d, 3.0)
    x = unit_rows(1, d, seed=1)[0]
    est = enc.decode(enc.encode(x.repeat(n, 1).float(), np.arange(n)))
    err = ((est - x) ** 2).sum(1)
    cal, P = enc.cal, padded_dim(d)
    upper = (P / enc.k) * (enc.k * cal.sigma**2 + cal.gamma * cal.sigma) + 1  # ‖x̂‖² ≤ ‖W^T y‖² (padding)
    assert torch.isfinite(est).all() and float(err.mean()) <= upper
    assert float(err.mean()) >= d * cal.sigma**2 * 0.95


def test_srht_is_unbiased_on_basis_vectors():
    """``‖W e_i‖ = 1`` for every SRHT draw, so the normalisation does nothing and ``E[x̂] = x`` at ``x = ±R e_i``."""
    d, k, n, radius = 12, 3, 40000, 0.8
    enc = make_encoder(f"projunit:k={k},transform=srht", d, 2.0, radius=radius)
    x = torch.zeros(d, dtype=torch.float64)
    x[5] = -radius
    w = enc.proj.forward((x / radius).repeat(50, 1), np.arange(50, dtype=np.uint64))
    assert torch.allclose(torch.linalg.vector_norm(w, dim=1), torch.ones(50, dtype=torch.float64))
    est = enc.decode(enc.encode(x.repeat(n, 1), np.arange(n)))
    assert float(((est.mean(0) - x).abs() / (est.std(0) / math.sqrt(n))).max()) < 4.5
