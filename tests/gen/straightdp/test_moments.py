"""StraightDP Stage 1: public basis, clipped features, contributions and their sensitivities, the
release's post-processing into a Gaussian mixture."""

import math

import numpy as np
import pytest

from sstq_fl.gen.straightdp import moments as mo

D, P_DIM, Y = 6, 4, 3


def _basis(seed: int = 0, p: int = P_DIM, d: int = D) -> np.ndarray:
    """A random ``[p, d]`` matrix with orthonormal rows."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, p)))
    return q.T


def _data(n: int = 600, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Class-dependent anisotropic Gaussian records ``[n, D]`` with labels in ``[0, Y)``."""
    rs = np.random.default_rng(seed)
    y = rs.integers(0, Y, n)
    centres = rs.normal(0, 2.0, (Y, D))
    scales = np.array([2.0, 1.5, 1.0, 0.7, 0.4, 0.2])
    return centres[y] + rs.standard_normal((n, D)) * scales, y


def _release(counts, sums_w, m2, count_std=0.0, r_f=1.0) -> mo.MomentRelease:
    return mo.MomentRelease(np.asarray(counts, float), np.asarray(sums_w, float), np.asarray(m2, float), count_std, r_f)


def _flat_release(contrib: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([contrib["counts"], contrib["sums_w"].ravel()])


# ----------------------------------------------------------------------------------------------- basis and features


def test_public_pca_is_orthonormal_top_eigenvectors_with_fixed_signs():
    x, _ = _data()
    basis, m_pub = mo.public_pca(x.reshape(-1, 2, 3), 3)
    assert basis.shape == (3, D)
    np.testing.assert_allclose(m_pub, x.mean(0))
    np.testing.assert_allclose(basis @ basis.T, np.eye(3), atol=1e-12)
    lam, vecs = np.linalg.eigh(np.cov(x.T))
    for k in range(3):
        assert abs(abs(basis[k] @ vecs[:, -1 - k]) - 1) < 1e-9
        assert basis[k, np.argmax(np.abs(basis[k]))] > 0
    again, _ = mo.public_pca(-x[::-1] + 0.0, 3)  # same scatter, permuted/negated data: same basis
    np.testing.assert_allclose(again, basis, atol=1e-10)


def test_norm_quantile_and_features_clip_only_long_rows():
    x, _ = _data()
    basis, m_pub = mo.public_pca(x, P_DIM)
    r_f = mo.norm_quantile(x, basis, m_pub, q=0.5)
    norms = np.linalg.norm((x - m_pub) @ basis.T, axis=1)
    assert r_f == pytest.approx(np.median(norms))
    f = mo.features(x, basis, m_pub, r_f)
    fn = np.linalg.norm(f, axis=1)
    assert np.all(fn <= r_f * (1 + 1e-12))
    short = norms <= r_f
    np.testing.assert_allclose(f[short], ((x - m_pub) @ basis.T)[short])
    np.testing.assert_allclose(fn[~short], r_f)
    np.testing.assert_allclose(mo.features(m_pub[None], basis, m_pub, r_f), 0.0)  # zero vector stays zero


@pytest.mark.parametrize(
    "call",
    [
        lambda x, b, m: mo.public_pca(x, D + 1),
        lambda x, b, m: mo.public_pca(x[:, 0], 2),
        lambda x, b, m: mo.norm_quantile(x, b, m, q=0.0),
        lambda x, b, m: mo.features(x, b, m, r_f=-1.0),
        lambda x, b, m: mo.features(x[:, :5], b, m, 1.0),
        lambda x, b, m: mo.features(np.full_like(x, np.nan), b, m, 1.0),
    ],
)
def test_basis_and_feature_inputs_are_checked(call):
    x, _ = _data(50)
    with pytest.raises(ValueError):
        call(x, _basis(), np.zeros(D))


# ----------------------------------------------------------------------------------------------- contributions


def test_record_contributions_are_per_class_counts_and_whitened_sums():
    x, y = _data()
    basis, m_pub = _basis(), np.zeros(D)
    r_f = 2.0
    f = mo.features(x, basis, m_pub, r_f)
    c = mo.record_contributions(f, y, r_f, classes=Y + 1)
    np.testing.assert_array_equal(c["counts"], [np.sum(y == k) for k in range(Y)] + [0])
    for k in range(Y):
        np.testing.assert_allclose(c["sums_w"][k], f[y == k].sum(0) / (2 * r_f))
    np.testing.assert_allclose(c["sums_w"][Y], 0.0)
    np.testing.assert_allclose(mo.second_moment_sum(f), sum(np.outer(v, v) for v in f))
    with pytest.raises(ValueError, match="clipped"):
        mo.record_contributions(f * 2, y, r_f, classes=Y)
    with pytest.raises(ValueError, match="labels"):
        mo.record_contributions(f, y + 5, r_f, classes=Y)


def _boundary_vectors(rs: np.random.Generator, n: int, r_f: float) -> np.ndarray:
    """Adversarial features: random directions at (or beyond, then clipped to) the clip radius."""
    v = rs.standard_normal((n, P_DIM)) * rs.choice([1e-3, 1.0, 1e3], (n, 1))
    v = v / np.linalg.norm(v, axis=1, keepdims=True) * r_f * rs.choice([1.0, 5.0], (n, 1))
    return mo.features(v, np.eye(P_DIM), np.zeros(P_DIM), r_f)


def test_one_record_contribution_norm_is_at_most_sqrt5_over_2():
    rs = np.random.default_rng(3)
    r_f = 0.7
    f = _boundary_vectors(rs, 200, r_f)
    norms = [np.linalg.norm(_flat_release(mo.record_contributions(f[i : i + 1], [i % Y], r_f, Y))) for i in range(200)]
    assert max(norms) <= math.sqrt(5) / 2 + 1e-12 <= 2
    assert max(norms) == pytest.approx(math.sqrt(5) / 2)  # attained at the boundary: the bound is tight


def test_add_remove_second_moment_shift_is_at_most_rf2_and_attained():
    """Adding or removing one record moves the second-moment sum by ``f fᵀ``, of Frobenius norm ``‖f‖² ≤ R_f²``: the
    maximiser is any record at the clip radius (the clipped long rows here), so the bound is attained."""
    rs = np.random.default_rng(5)
    r_f = 0.7
    f = _boundary_vectors(rs, 200, r_f)
    frob = [np.linalg.norm(mo.second_moment_sum(f[i : i + 1])) for i in range(200)]
    assert max(frob) <= r_f**2 + 1e-12 and max(frob) == pytest.approx(r_f**2)


def test_replace_one_shift_is_at_most_sqrt_5_over_2_and_second_moment_at_most_2rf2():
    rs = np.random.default_rng(4)
    r_f = 1.3
    base_f, base_y = _boundary_vectors(rs, 20, r_f), rs.integers(0, Y, 20)
    release = _flat_release(mo.record_contributions(base_f, base_y, r_f, Y))
    m2 = mo.second_moment_sum(base_f)
    shifts, frob = [], []
    for new_f, new_y in zip(_boundary_vectors(rs, 300, r_f), rs.integers(0, Y, 300)):
        f2, y2 = base_f.copy(), base_y.copy()
        f2[0], y2[0] = new_f, new_y
        shifts.append(np.linalg.norm(_flat_release(mo.record_contributions(f2, y2, r_f, Y)) - release))
        frob.append(np.linalg.norm(mo.second_moment_sum(f2) - m2))
    assert max(shifts) <= math.sqrt(5 / 2) + 1e-12
    assert max(shifts) == pytest.approx(math.sqrt(5 / 2))  # different classes, both at the boundary
    assert max(frob) <= 2 * r_f**2 + 1e-12


# ----------------------------------------------------------------------------------------------- release and mixture


def test_release_and_mixture_validate_their_inputs():
    with pytest.raises(ValueError, match="sums_w"):
        _release([1, 2], np.zeros((3, 2)), np.eye(2))
    with pytest.raises(ValueError, match="m2"):
        _release([1, 2], np.zeros((2, 2)), np.eye(3))
    with pytest.raises(ValueError, match="count_std"):
        _release([1, 2], np.zeros((2, 2)), np.eye(2), count_std=-1)
    with pytest.raises(ValueError, match="r_f"):
        _release([1, 2], np.zeros((2, 2)), np.eye(2), r_f=0)
    w = np.linalg.qr(np.random.default_rng(0).standard_normal((4, 2)))[0]
    ok = {"mu": np.zeros((2, 4)), "pi": [0.5, 0.5], "basis": w, "evals": [2.0, 1.0], "floor": 0.1}
    mo.GaussianMixture(**ok)
    for key, bad, msg in [("pi", [0.7, 0.7], "pi"), ("pi", [-0.5, 1.5], "pi"), ("basis", 2 * w, "orthonormal"),
                          ("evals", [2.0, 0.05], "evals"), ("floor", 0.0, "floor"), ("mu", np.zeros((2, 5)), "basis")]:
        with pytest.raises(ValueError, match=msg):
            mo.GaussianMixture(**{**ok, key: bad})


def test_mixture_sample_has_the_stated_moments():
    w = np.linalg.qr(np.random.default_rng(0).standard_normal((4, 2)))[0]
    mu = np.array([[0, 1, 2, 3], [5, 5, 5, 5.0]])
    g = mo.GaussianMixture(mu, np.array([0.3, 0.7]), w, np.array([4.0, 1.0]), 0.25)
    z = g.sample(np.zeros(40000, dtype=np.int64), np.random.default_rng(1))
    np.testing.assert_allclose(z.mean(0), g.mu[0], atol=4 * math.sqrt(4 / 40000))
    np.testing.assert_allclose(np.cov(z.T), g.covariance(), atol=0.12)
    np.testing.assert_allclose(np.linalg.eigvalsh(g.covariance()), [0.25, 0.25, 1.0, 4.0], atol=1e-12)
    with pytest.raises(ValueError, match="labels"):
        g.sample(np.array([2]), np.random.default_rng(0))


def test_noiseless_postprocess_recovers_empirical_means_weights_and_lifted_covariance():
    x, y = _data()
    basis, m_pub = _basis(), x.mean(0) + 0.3
    f = mo.features(x, basis, m_pub, 1e6)  # nothing clipped
    release = mo.exact_moments(f, y, len(y), 1e6, classes=Y)
    floor = 1e-3
    g, diag = mo.postprocess(release, basis, m_pub, rank=P_DIM, floor=floor)
    pi = np.bincount(y) / len(y)
    np.testing.assert_allclose(g.pi, pi)
    means = np.stack([x[y == k].mean(0) for k in range(Y)])
    np.testing.assert_allclose(g.mu, m_pub + (means - m_pub) @ basis.T @ basis, atol=1e-9)
    within = sum(pi[k] * np.cov(f[y == k].T, bias=True) for k in range(Y))
    lam, vecs = np.linalg.eigh(within)
    expected = basis.T @ (vecs * np.maximum(lam, floor)) @ vecs.T @ basis + floor * (np.eye(D) - basis.T @ basis)
    np.testing.assert_allclose(g.covariance(), expected, atol=1e-8)
    assert diag["fallback_classes"] == [] and diag["negative_eigenvalues"] == 0
    assert diag["n_tilde"] == [float(v) for v in np.bincount(y)]


def test_rank_truncation_keeps_the_top_eigenpairs_and_floors_the_rest():
    x, y = _data()
    basis, m_pub = _basis(), x.mean(0)
    f = mo.features(x, basis, m_pub, 1e6)
    release = mo.exact_moments(f, y, len(y), 1e6, classes=Y)
    full, _ = mo.postprocess(release, basis, m_pub, rank=P_DIM, floor=1e-3)
    trunc, _ = mo.postprocess(release, basis, m_pub, rank=2, floor=1e-3)
    top = np.sort(np.linalg.eigvalsh(full.covariance()))[::-1]
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(trunc.covariance()))[::-1], [*top[:2], *[1e-3] * (D - 2)])
    assert trunc.basis.shape == (D, 2)


def test_indefinite_noisy_second_moment_gives_psd_covariance_floored():
    x, y = _data()
    basis, m_pub = _basis(), x.mean(0)
    f = mo.features(x, basis, m_pub, 3.0)
    exact = mo.exact_moments(f, y, len(y), 3.0, classes=Y)
    noise = np.random.default_rng(5).normal(0, 3.0, (P_DIM, P_DIM))
    noisy = _release(exact.counts, exact.sums_w, exact.m2 + noise, count_std=0.1, r_f=3.0)
    floor = 0.05
    g, diag = mo.postprocess(noisy, basis, m_pub, rank=P_DIM, floor=floor)
    assert diag["negative_eigenvalues"] > 0 and diag["min_raw_eigenvalue"] < 0
    assert np.linalg.eigvalsh(g.covariance()).min() >= floor - 1e-12
    np.testing.assert_allclose(g.covariance(), g.covariance().T, atol=1e-12)


def test_tiny_noisy_count_falls_back_to_global_mean_and_nonpositive_counts_clamp_to_one():
    sums_w = np.array([[1.0, 0.0], [0.0, 2.0], [0.3, 0.3]])
    r = _release([100.0, 50.0, 4.0], sums_w, np.eye(2), count_std=2.0, r_f=0.5)  # 4 < 3 × 2: class 2 falls back
    g, diag = mo.postprocess(r, np.eye(2), np.zeros(2), rank=2)
    assert diag["fallback_classes"] == [2]
    global_mean = (2 * 0.5 * sums_w).sum(0) / 154.0
    np.testing.assert_allclose(g.mu[2], global_mean)
    np.testing.assert_allclose(g.mu[:2], [[1 / 100, 0], [0, 2 / 50]])
    r = _release([-7.0, 0.0, 10.0], sums_w, np.eye(2), count_std=0.0, r_f=0.5)
    g, diag = mo.postprocess(r, np.eye(2), np.zeros(2), rank=2)
    assert diag["n_tilde"] == [1.0, 1.0, 10.0] and diag["fallback_classes"] == []
    np.testing.assert_allclose(g.pi, [1 / 12, 1 / 12, 10 / 12])
    np.testing.assert_allclose(g.mu, [[1.0, 0.0], [0.0, 2.0], [0.03, 0.03]])
    assert np.all(np.isfinite(g.covariance()))


def _floored_psd(m: np.ndarray, floor: float) -> np.ndarray:
    lam, vecs = np.linalg.eigh(0.5 * (m + m.T))
    return (vecs * np.maximum(np.maximum(lam, 0), floor)) @ vecs.T


def test_psd_projection_comes_after_the_mean_subtraction():
    m2 = np.array([[2.0, 0.0], [0.0, -1.0]])  # indefinite noisy second moment
    mu = np.array([1.0, 1.0])  # one class: Σ^f = M̃₂ − μμᵀ
    r = _release([10.0], [mu * 10 / 2], m2, r_f=1.0)
    floor = 1e-3
    g, _ = mo.postprocess(r, np.eye(2), np.zeros(2), rank=2, floor=floor)
    right = _floored_psd(m2 - np.outer(mu, mu), floor)
    wrong = _floored_psd(_floored_psd(m2, 0.0) - np.outer(mu, mu), floor)
    np.testing.assert_allclose(g.covariance(), right, atol=1e-12)
    assert np.abs(right - wrong).max() > 0.1


def test_postprocess_rejects_bad_arguments():
    r = _release([5.0, 5.0], np.zeros((2, 2)), np.eye(2))
    for kwargs, msg in [({"rank": 3}, "rank"), ({"rank": 1, "floor": 0.0}, "floor"),
                        ({"rank": 1, "fallback_factor": -1.0}, "fallback_factor")]:
        with pytest.raises(ValueError, match=msg):
            mo.postprocess(r, np.eye(2), np.zeros(2), **kwargs)
    with pytest.raises(ValueError, match="orthonormal"):
        mo.postprocess(r, 2 * np.eye(2), np.zeros(2), rank=1)
    with pytest.raises(ValueError, match="P"):
        mo.postprocess(r, np.eye(3), np.zeros(3), rank=1)


def test_public_mixture_is_the_noiseless_pipeline():
    x, y = _data()
    basis, m_pub = mo.public_pca(x, P_DIM)
    r_f = mo.norm_quantile(x, basis, m_pub)
    g = mo.public_mixture(x, y, basis, m_pub, r_f, rank=2, floor=1e-2, classes=Y)
    f = mo.features(x, basis, m_pub, r_f)
    ref, _ = mo.postprocess(mo.exact_moments(f, y, len(y), r_f, Y), basis, m_pub, 2, 1e-2)
    np.testing.assert_allclose(g.mu, ref.mu)
    np.testing.assert_allclose(g.covariance(), ref.covariance())
