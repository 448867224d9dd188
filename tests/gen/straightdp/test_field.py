"""StraightDP analytic field (the closed-form flow-matching velocity of a Gaussian mixture): posterior means
against Monte Carlo, the low-rank inversion against dense linear algebra, the guidance start law, the empirical
field and the τ / t₀ calibration rules."""

import math

import numpy as np
import pytest
import torch

from sstq_fl.gen.straightdp import field as fd
from sstq_fl.gen.straightdp.moments import GaussianMixture


def _mixture_2d() -> GaussianMixture:
    """Three well-separated classes in 2-D sharing a full-rank tilted covariance (r = D = 2)."""
    c, s = math.cos(0.6), math.sin(0.6)
    return GaussianMixture(
        mu=np.array([[-2.0, 0.0], [2.0, 1.0], [0.0, -2.5]]),
        pi=np.array([0.5, 0.3, 0.2]),
        basis=np.array([[c, -s], [s, c]]),
        evals=np.array([1.5, 0.3]),
        floor=0.1,
    )


def _mixture_lowrank(d: int = 8, r: int = 3, classes: int = 4, seed: int = 0) -> GaussianMixture:
    rs = np.random.default_rng(seed)
    w = np.linalg.qr(rs.standard_normal((d, r)))[0]
    pi = rs.uniform(0.5, 1.5, classes)
    return GaussianMixture(rs.normal(0, 1.5, (classes, d)), pi / pi.sum(), w, rs.uniform(0.5, 3.0, r), 0.2)


def _snis(z: np.ndarray, x: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """Self-normalised importance estimate of E[z | x_t = x] from prior draws z, weights N(x; tz, (1 − t)²I), with its
    delta-method standard error per coordinate."""
    logw = -((x - t * z) ** 2).sum(1) / (2 * (1 - t) ** 2)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    est = w @ z
    se = np.sqrt((w[:, None] ** 2 * (z - est) ** 2).sum(0))
    return est, se


@pytest.fixture(scope="module")
def prior_draws() -> tuple[np.ndarray, np.ndarray]:
    """400k draws ``(z, y)`` from the 2-D mixture, shared by the Monte-Carlo checks."""
    g = _mixture_2d()
    rs = np.random.default_rng(10)
    y = rs.choice(g.classes, 400_000, p=g.pi)
    return g.sample(y, rs), y


@pytest.mark.parametrize("t", [0.1, 0.5, 0.9])
def test_posterior_mean_matches_importance_sampling_conditional_and_null(t, prior_draws):
    g = _mixture_2d()
    field = fd.AnalyticField(g)
    z, labels = prior_draws
    rs = np.random.default_rng(int(10 * t))
    for y in range(g.classes + 1):  # 0..2 conditional, 3 = null
        prior = z if y == g.classes else z[labels == y]
        # typical probes: x_t drawn from its own law (under component y, or under the mixture for the null branch)
        y_probe = torch.tensor(rs.choice(g.classes, 3, p=g.pi) if y == g.classes else [y] * 3)
        probes = fd.guidance_start(g, t, y_probe, torch.Generator().manual_seed(y)).numpy()
        got = field.posterior_mean(torch.tensor(probes), t, torch.full((3,), y)).numpy()
        for x, mean in zip(probes, got):
            est, se = _snis(prior, x, t)
            assert np.all(np.abs(mean - est) <= 5 * se), (t, y, mean, est, se)
            assert se.max() < 0.03  # the check is sharp enough to catch a wrong formula


def test_low_rank_inversion_equals_dense_solve():
    g = _mixture_lowrank()
    field = fd.AnalyticField(g)
    sigma = torch.tensor(g.covariance())
    v = torch.randn(5, g.dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    t = torch.tensor([0.0, 0.2, 0.5, 0.8, 0.99], dtype=torch.float64)
    for i in range(5):
        a = (1 - t[i]) ** 2 * torch.eye(g.dim, dtype=torch.float64) + t[i] ** 2 * sigma
        dense = torch.linalg.solve(a, v[i])
        tol = {"rtol": 1e-10, "atol": 1e-10}
        torch.testing.assert_close(field.apply_a_inv(v[i : i + 1], t[i])[0], dense, **tol)
        torch.testing.assert_close(field.apply_sigma_a_inv(v[i : i + 1], t[i])[0], sigma @ dense, **tol)
        trace = torch.trace(sigma - t[i] ** 2 * sigma @ torch.linalg.solve(a, sigma))
        assert field.posterior_variance_trace(float(t[i])) == pytest.approx(float(trace), rel=1e-10)
    assert field.posterior_variance_trace(1.0) == 0.0


def test_posterior_mean_equals_dense_proposition_formula_with_per_row_times():
    g = _mixture_lowrank()
    field = fd.AnalyticField(g)
    gen = torch.Generator().manual_seed(1)
    x = 2 * torch.randn(6, g.dim, generator=gen, dtype=torch.float64)
    t = torch.tensor([0.05, 0.3, 0.5, 0.7, 0.9, 0.6], dtype=torch.float64)
    y = torch.tensor([0, 3, 4, 1, 4, 2])  # 4 = null
    got = field.posterior_mean(x, t, y)
    sigma, mu = torch.tensor(g.covariance()), torch.tensor(g.mu)
    for i in range(6):
        a = (1 - t[i]) ** 2 * torch.eye(g.dim, dtype=torch.float64) + t[i] ** 2 * sigma
        cond = mu + t[i] * (sigma @ torch.linalg.solve(a, (x[i] - t[i] * mu).T)).T  # [Y, D]
        if y[i] < g.classes:
            torch.testing.assert_close(got[i], cond[y[i]])
        else:
            dist = torch.distributions.MultivariateNormal(t[i] * mu, covariance_matrix=a)
            w = torch.softmax(torch.log(torch.tensor(g.pi)) + dist.log_prob(x[i]), 0)
            torch.testing.assert_close(got[i], w @ cond)


def test_velocity_tends_to_mean_minus_x_at_the_noise_end_and_stays_finite_at_t1():
    g = _mixture_2d()
    field = fd.AnalyticField(g)
    x = torch.tensor([[0.3, -0.4], [1.0, 2.0], [-3.0, 0.5], [0.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3])
    target = torch.tensor(np.vstack([g.mu, g.pi @ g.mu])) - x
    torch.testing.assert_close(field.velocity(x, 0.0, y), target, rtol=0, atol=1e-15)
    torch.testing.assert_close(field.velocity(x, 1e-7, y), target, rtol=0, atol=1e-5)
    assert (field.velocity(x, 1e-2, y) - target).abs().max() > 1e-4  # t actually enters
    assert bool(torch.isfinite(field.velocity(x, 1.0, y)).all())
    torch.testing.assert_close(field.velocity(x, 1.0, y), field.velocity(x, 1 - fd.ONE_MINUS_T_MIN, y))


def test_mixed_batches_equal_separate_calls_and_keep_dtype():
    g = _mixture_lowrank()
    field = fd.AnalyticField(g)
    x = torch.randn(8, g.dim, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([4, 0, 4, 1, 2, 4, 3, 0])
    both = field.velocity(x, 0.4, y)
    assert both.dtype == torch.float32 and both.shape == x.shape
    for i in range(8):
        torch.testing.assert_close(both[i : i + 1], field.velocity(x[i : i + 1], 0.4, y[i : i + 1]))


@pytest.mark.parametrize(
    "call, msg",
    [
        (lambda f, x: f.velocity(x, 1.5, torch.zeros(3, dtype=torch.long)), "t"),
        (lambda f, x: f.velocity(x, torch.zeros(2), torch.zeros(3, dtype=torch.long)), "t"),
        (lambda f, x: f.velocity(x, 0.5, torch.full((3,), 5)), "labels"),
        (lambda f, x: f.velocity(x, 0.5, torch.zeros(3)), "integers"),
        (lambda f, x: f.velocity(x[:, :4], 0.5, torch.zeros(3, dtype=torch.long)), "shape"),
        (lambda f, x: f.velocity(x * float("nan"), 0.5, torch.zeros(3, dtype=torch.long)), "NaN"),
        (lambda f, x: f.posterior_variance_trace(-0.1), "t"),
        (lambda f, x: fd.empirical_field(x, 0.5, torch.zeros(0, 8)), "data_z"),
    ],
)
def test_field_inputs_are_checked(call, msg):
    field = fd.AnalyticField(_mixture_lowrank())
    with pytest.raises(ValueError, match=msg):
        call(field, torch.zeros(3, 8, dtype=torch.float64))


def test_guidance_start_has_the_law_of_x_t0_under_the_component():
    g = _mixture_lowrank(d=3, r=1, classes=2)
    t0, n = 0.4, 100_000
    gen = torch.Generator().manual_seed(3)
    x = fd.guidance_start(g, t0, torch.ones(n, dtype=torch.long), gen).numpy()
    cov = t0**2 * g.covariance() + (1 - t0) ** 2 * np.eye(3)
    np.testing.assert_allclose(x.mean(0), t0 * g.mu[1], atol=5 * math.sqrt(cov.diagonal().max() / n))
    np.testing.assert_allclose(np.cov(x.T), cov, atol=5 * math.sqrt(2 / n) * cov.diagonal().max())
    again = fd.guidance_start(g, t0, torch.ones(n, dtype=torch.long), torch.Generator().manual_seed(3)).numpy()
    np.testing.assert_array_equal(x, again)
    null = fd.guidance_start(g, t0, torch.full((n,), 2), gen, dtype=torch.float32)
    assert null.dtype == torch.float32
    np.testing.assert_allclose(null.double().mean(0).numpy(), t0 * g.pi @ g.mu, atol=0.02)


def test_empirical_field_is_the_softmax_formula_independent_of_chunking():
    rs = np.random.default_rng(4)
    z = torch.tensor(rs.normal(0, 1, (50, 5)))
    x = torch.tensor(rs.normal(0, 1, (7, 5)))
    t = torch.linspace(0.0, 0.9, 7, dtype=torch.float64)
    ref = torch.empty_like(x)
    for i in range(7):
        w = torch.softmax(-((x[i] - t[i] * z) ** 2).sum(1) / (2 * (1 - t[i]) ** 2), 0)
        ref[i] = (w @ z - x[i]) / (1 - t[i])
    torch.testing.assert_close(fd.empirical_field(x, t, z), ref)
    torch.testing.assert_close(fd.empirical_field(x, t, z, max_elements=60), ref)
    torch.testing.assert_close(fd.empirical_field(x[:1], 0.0, z)[0], z.mean(0) - x[0])


def _public(n: int = 120, d: int = 10, seed: int = 5) -> tuple[np.ndarray, np.ndarray, fd.AnalyticField]:
    """Sparse public data and the analytic field of a mixture with its exact class means."""
    rs = np.random.default_rng(seed)
    y = rs.integers(0, 3, n)
    z = rs.normal(0, 1, (3, d))[y] * 2 + rs.normal(0, 1, (n, d))
    mu = np.stack([z[y == k].mean(0) for k in range(3)])
    g = GaussianMixture(mu, np.bincount(y) / n, np.zeros((d, 0)), np.zeros(0), 1.0)
    return z, y, fd.AnalyticField(g)


def test_field_agreement_is_one_at_the_noise_end_drops_near_data_and_is_seeded():
    z, y, field = _public()
    ts = [0.0, 0.5, 0.95]
    cos = fd.field_agreement(field, z, y, ts, 64, torch.Generator().manual_seed(0))
    assert cos[0] == pytest.approx(1.0, abs=1e-12)  # both fields are μ_y − x at t = 0
    assert cos[2] < 0.9  # the empirical field memorises single records near t = 1
    again = fd.field_agreement(field, z, y, ts, 64, torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(cos, again)
    with pytest.raises(ValueError, match="n_probe"):
        fd.field_agreement(field, z, y, ts, 0, torch.Generator())


def test_knee_finds_the_corner_of_concave_and_convex_curves():
    ts = np.linspace(0, 1, 21)
    assert fd.knee(ts, np.where(ts <= 0.3, 1.0, 1.0 - (ts - 0.3) / 0.7)) == pytest.approx(0.3)
    assert fd.knee(ts, np.maximum(0.0, ts - 0.6)) == pytest.approx(0.6)
    assert fd.knee(ts, np.ones_like(ts)) == 0.0
    with pytest.raises(ValueError, match="increasing"):
        fd.knee(ts[::-1], ts)
    with pytest.raises(ValueError, match="length"):
        fd.knee(ts[:2], ts[:2])


def test_tau_and_t0_rules_on_synthetic_curves():
    ts = np.round(np.linspace(0.05, 0.95, 19), 10)
    cos = np.where(ts <= 0.4, 1.0, 0.1)
    assert fd.tau_from_curve(ts, cos) == pytest.approx(0.4)
    assert fd.tau_from_curve([0.01, 0.02, 0.03, 0.5, 0.9], [1.0, 1.0, 0.0, 0.0, 0.0]) == fd.TAU_RANGE[0]  # clamped
    plateau = np.array([0.9, 0.95, 0.96, 0.95, 0.93, 0.5])
    assert fd.t0_from_curve(ts[:6], plateau) == pytest.approx(ts[3])
    assert fd.t0_from_curve(ts[:6], plateau, tol=0.05) == pytest.approx(ts[4])


def test_calibration_is_deterministic_public_only_and_in_range():
    z, y, field = _public()
    ts = [0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95]
    tau, t0, curve = fd.calibrate_times(field, z, y, ts=ts, n_probe=48, seed=7)
    assert fd.TAU_RANGE[0] <= tau <= fd.TAU_RANGE[1] and t0 in ts
    again = fd.calibrate_times(field, z, y, ts=ts, n_probe=48, seed=7)
    assert (tau, t0) == again[:2] and np.array_equal(curve, again[2])


@pytest.mark.parametrize("t", [0.25, 0.6])
def test_posterior_mean_is_the_regression_of_z_on_x_in_latent_dimension(t):
    """Monte Carlo in d = 32 (the latent space; r = 8): the analytic E[z | x_t, y] is the least-squares regression
    of z on x_t, so its residual has mean 0, is uncorrelated with x_t, and its mean squared norm is V̄(t); the null
    branch's residual is unbiased and uncorrelated with x_t too, and never beats the conditional one."""
    g = _mixture_lowrank(d=32, r=8, classes=10, seed=4)
    field, rs, n = fd.AnalyticField(g), np.random.default_rng(5), 100_000
    y = rs.choice(g.classes, n, p=g.pi)
    z = g.sample(y, rs)
    x = (1 - t) * rs.standard_normal(z.shape) + t * z
    for labels, exact in ((y, True), (np.full(n, g.classes), False)):
        res = z - field.posterior_mean(torch.tensor(x), t, torch.tensor(labels)).numpy()
        se = res.std(0) / math.sqrt(n)
        assert np.all(np.abs(res.mean(0)) < 5 * se)
        cross = (res - res.mean(0)).T @ (x - x.mean(0)) / n  # [32, 32] cross-covariance, ~0
        assert np.abs(cross).max() < 6 * (res.std(0)[:, None] * x.std(0)[None, :]).max() / math.sqrt(n)
        mse = float((res**2).sum(1).mean())
        if exact:
            assert mse == pytest.approx(field.posterior_variance_trace(t), rel=0.02)
            cond = mse
        else:
            assert mse >= cond * 0.99
