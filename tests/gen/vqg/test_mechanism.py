"""DP-VQG Stage II: the per-location exponential mechanism, label RR, and the budget's accounting."""

import itertools
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from sstq_fl.gen.runner import ClientContext
from sstq_fl.gen.vqg.mechanism import (
    NOT_DP,
    argmin_tokens,
    calibrate_stage2,
    em_logits,
    em_peakedness,
    em_probabilities,
    em_sample,
    em_utilities,
    eps0_for_ideal_probability,
    eps0_mode_a,
    eps0_mode_b,
    feasibility,
    fill_mode_a,
    gumbel_noise,
    ideal_argmin_probability,
    label_epsilon,
    plan_ledger,
    project_ball,
    record_level_epsilon,
    release_tokens,
    rr_labels,
    rr_law,
    split_budget,
    stage2_plan,
)
from sstq_fl.privacy.errors import Budget, BudgetExceededError
from sstq_fl.privacy.events import ExponentialMechanismEvent, NonPrivateEvent, PublicDataEvent, PureDpEvent
from sstq_fl.privacy.ledger import PrivacyLedger

DELTA = 1e-5


def _sphere(rng: np.random.Generator, n: int, d: int, radius: float) -> np.ndarray:
    v = rng.normal(size=(n, d))
    return radius * v / np.linalg.norm(v, axis=1, keepdims=True)


def _probs(tokens: np.ndarray, codes: np.ndarray, eps0: float, R: float) -> np.ndarray:
    """EM law of each single-token input: ``[n, K]``."""
    return em_probabilities(em_logits(tokens[:, None, :], codes, eps0, R))[:, 0, :]


# ----------------------------------------------------------------------------- the per-location EM
@pytest.mark.parametrize("eps0", [0.05, 0.7, 3.0])
def test_em_probability_ratio_is_at_most_e_eps0_over_all_pairs(eps0):
    rng = np.random.default_rng(0)
    R, d, K = 1.7, 3, 5
    codes = np.concatenate([rng.uniform(-1, 1, (2, d)), _sphere(rng, 2, d, R), _sphere(rng, 1, d, 4 * R)])  # one outside
    e = _sphere(rng, 4, d, R)
    inputs = np.concatenate([rng.uniform(-1, 1, (4, d)), e, -e, codes, -codes, 9 * codes, np.zeros((1, d))])
    p = _probs(inputs, codes, eps0, R)
    assert np.all(p > 0) and np.allclose(p.sum(1), 1)
    ratio = p[:, None, :] / p[None, :, :]  # [x, x', k]
    assert ratio.max() <= math.exp(eps0) + 1e-12
    assert p.min() >= math.exp(-eps0 / 2) / K * (1 - 1e-12)  # every one of the K codes keeps its floor mass


@pytest.mark.parametrize("eps0", [0.5, 2.0])
def test_em_bound_is_attained_for_antipodal_extreme_inputs(eps0):
    rng = np.random.default_rng(1)
    R, d = 2.5, 4
    c = _sphere(rng, 1, d, R)[0]
    a = eps0 / 2
    for m in (4, 4000):  # one code at c, m codes at −c; inputs c and −c (given far outside: projected)
        codes = np.concatenate([c[None], np.repeat(-3 * c[None], m, 0)])
        p = _probs(np.stack([7 * c, -c]), codes, eps0, R)
        ratio = p[0, 0] / p[1, 0]
        exact = math.exp(a) * (m + math.exp(-a)) / (1 + m * math.exp(-a))
        assert ratio == pytest.approx(exact, rel=1e-7)  # Π_R's 1e-8 in the denominator keeps points just inside
        assert ratio <= math.exp(eps0) + 1e-12
    assert ratio >= math.exp(eps0) * 0.99  # tight: the logits are not under-scaled (Δu = 8R² would cap it at e^{ε₀/2})
    codes5 = np.concatenate([c[None], np.repeat(-c[None], 4, 0)])
    p5 = _probs(np.stack([c, -c]), codes5, eps0, R)
    assert p5[0, 0] / p5[1, 0] > math.exp(0.75 * eps0)


def test_projection_uses_the_same_R_and_utilities_lie_in_range():
    rng = np.random.default_rng(2)
    R, eps0 = 0.6, 1.3
    tokens = rng.normal(size=(3, 5, 4)) * np.array([0.01, 1, 10, 100])  # norms inside and far outside the ball
    codes = np.concatenate([rng.normal(size=(6, 4)) * 20, rng.normal(size=(2, 4)) * 0.01])
    assert np.linalg.norm(project_ball(tokens, R), axis=-1).max() <= R
    small = rng.normal(size=(5, 4)) * 0.01
    np.testing.assert_array_equal(project_ball(small, R), small)

    def proj(v: np.ndarray) -> np.ndarray:
        n = np.linalg.norm(v, axis=-1, keepdims=True)
        return v * np.minimum(1, R / (n + 1e-8))

    want = -(((proj(tokens)[:, :, None, :] - proj(codes)[None, None]) ** 2).sum(-1))
    u = em_utilities(tokens, codes, R)
    np.testing.assert_allclose(u, want, rtol=0, atol=1e-12)
    assert u.min() >= -4 * R * R and u.max() <= 0
    assert u.min() < -3 * R * R  # the range is used: codes and tokens both reach the sphere of radius R
    logits = em_logits(tokens, codes, eps0, R)
    np.testing.assert_allclose(logits, eps0 * u / (2 * 4 * R * R), rtol=1e-15)
    assert logits.min() >= -eps0 / 2 and logits.max() <= 0
    lt = em_logits(torch.from_numpy(tokens).float(), torch.from_numpy(codes), eps0, R)  # torch in, torch float64 out
    assert isinstance(lt, torch.Tensor) and lt.dtype == torch.float64
    np.testing.assert_allclose(lt.numpy(), logits, atol=1e-6)


def test_em_sample_follows_the_exact_law():
    rng = np.random.default_rng(3)
    R, eps0, n, K = 1.0, 6.0, 30_000, 5
    base = np.concatenate([_sphere(rng, 1, 3, R), rng.uniform(-0.5, 0.5, (1, 3)), _sphere(rng, 1, 3, R)])[None]
    tokens = np.repeat(base, n, 0)  # [n, 3 locations, d]
    codes = _sphere(rng, K, 3, R)
    logits = em_logits(tokens, codes, eps0, R)
    law = em_probabilities(logits[:1])[0]  # [L, K]
    assert law.max() > 2 / K  # a law far from uniform, so a wrong sampler shows
    draws = em_sample(logits, rng.uniform(size=logits.shape))
    for loc in range(3):
        counts = np.bincount(draws[:, loc], minlength=K)
        assert stats.chisquare(counts, n * law[loc]).pvalue > 1e-3
    shifted = np.bincount(em_sample(logits, np.roll(rng.uniform(size=logits.shape), 1, -1))[:, 0], minlength=K)
    assert stats.chisquare(shifted, n * law[0]).pvalue > 1e-3
    wrong = np.full(K, 1 / K)  # the test can fail: the draws are far from the uniform law
    assert stats.chisquare(np.bincount(draws[:, 0], minlength=K), n * wrong).pvalue < 1e-3


def test_em_sample_guards_the_uniforms_ends_and_is_deterministic():
    g = gumbel_noise(np.array([0.0, 1e-300, 0.5, np.nextafter(1, 0), 1.0]))
    assert torch.isfinite(g).all() and g.min() > -7 and g.max() < 37
    logits = np.log(np.array([[[0.2, 0.3, 0.5]]]))
    for u in ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.5, 1.0], [np.nextafter(1, 0), 0.0, 0.0]):
        k = em_sample(logits, np.array([[u]]))
        assert k.shape == (1, 1) and 0 <= k[0, 0] < 3
    u = np.random.default_rng(4).uniform(size=(7, 2, 3))
    lg = np.repeat(np.repeat(logits, 7, 0), 2, 1)
    np.testing.assert_array_equal(em_sample(lg, u), em_sample(lg, u.copy()))
    with pytest.raises(ValueError):
        em_sample(lg, u[..., :2])


@pytest.mark.parametrize("randomness", ["reproducible", "secure"])
def test_release_tokens_from_client_uniforms(randomness):
    rng = np.random.default_rng(5)
    ctx = ClientContext(0, np.zeros((4, 1)), np.zeros(4, dtype=np.int64), seed=3, round=0, randomness=randomness)
    tokens, codes = rng.normal(size=(4, 9, 8)), rng.normal(size=(16, 8))
    u = ctx.uniform("vqg:em", 4 * 9 * 16).reshape(4, 9, 16)
    z = release_tokens(tokens, codes, 0.1, 1.0, u)
    assert z.shape == (4, 9) and z.dtype == np.int64 and z.min() >= 0 and z.max() < 16


# ----------------------------------------------------------------------------- labels: k-ary RR
@pytest.mark.parametrize("eps_y,k", [(0.5, 10), (2.0, 3), (0.01, 2), (40.0, 10)])
def test_rr_law_odds_ratio_is_exactly_e_eps(eps_y, k):
    P = rr_law(eps_y, k)
    np.testing.assert_allclose(P.sum(1), 1, rtol=1e-15)
    for y, y2 in itertools.permutations(range(k), 2):
        assert P[y, y] / P[y2, y] == pytest.approx(math.exp(eps_y), rel=1e-12)
        assert P[y, y2] == pytest.approx(P[y, (y2 + 1) % k if (y2 + 1) % k != y else (y2 + 2) % k], rel=1e-15)


@pytest.mark.parametrize("eps_y,k", [(0.5, 10), (2.0, 3)])
def test_rr_sampler_implements_the_law(eps_y, k):
    P = rr_law(eps_y, k)
    M = 200_000
    grid = (np.arange(M) + 0.5) / M  # the sampler is deterministic in its uniforms: a fine grid gives its exact law
    g2 = np.stack(np.meshgrid((np.arange(500) + 0.5) / 500, (np.arange(400) + 0.5) / 400, indexing="ij"), -1).reshape(-1, 2)
    rng = np.random.default_rng(6)
    for y in range(k):
        law1 = np.bincount(rr_labels(np.full(M, y), eps_y, k, grid), minlength=k) / M
        np.testing.assert_allclose(law1, P[y], atol=2 / M)
        law2 = np.bincount(rr_labels(np.full(len(g2), y), eps_y, k, g2), minlength=k) / len(g2)
        np.testing.assert_allclose(law2, P[y], atol=2 / 400)
        emp = np.bincount(rr_labels(np.full(M, y), eps_y, k, rng.uniform(size=M)), minlength=k) / M
        assert np.all(np.abs(emp - P[y]) <= 5 * np.sqrt(P[y] / M) + 1e-4)
    emp0 = np.bincount(rr_labels(np.zeros(M, np.int64), eps_y, k, rng.uniform(size=M)), minlength=k) / M
    assert emp0[0] / emp0[1:].mean() == pytest.approx(math.exp(eps_y), rel=0.05)
    y = rng.integers(0, k, 50)
    u = rng.uniform(size=50)
    np.testing.assert_array_equal(rr_labels(y, eps_y, k, u), rr_labels(y, eps_y, k, u.copy()))
    with pytest.raises(ValueError):
        rr_labels(np.array([k]), eps_y, k, np.array([0.5]))


# ----------------------------------------------------------------------------- budget and accounting
def test_split_budget_and_public_labels():
    assert split_budget(10.0, "fp") == pytest.approx((8.0, 2.0))
    assert split_budget(3.0, "pp") == (0.0, 3.0)
    assert label_epsilon(2.0, "private") == pytest.approx(0.5)
    assert label_epsilon(2.0, "public") == 0.0
    b = calibrate_stage2(10.0, DELTA, 49, "fp", "A", labels="public")
    rep = b.report()
    assert rep["labels_public"] is True and "public" in rep["labels_note"] and rep["eps_y"] == 0.0
    assert b.eps0 == pytest.approx(2.0 / 49)
    assert any(isinstance(ev, PublicDataEvent) for ev, _ in b.plan())
    assert calibrate_stage2(10.0, DELTA, 49).report()["labels_public"] is False
    with pytest.raises(ValueError):
        split_budget(1.0, "FP-VQG")
    with pytest.raises(ValueError):
        label_epsilon(2.0, "hidden")


@pytest.mark.parametrize("epsilon,variant,labels", [(10.0, "fp", "private"), (10.0, "fp", "public"), (2.0, "pp", "private"),
                                                    (1.0, "fp", "private")])
def test_modes_a_and_b_are_certified_by_the_ledger(epsilon, variant, labels):
    hw = 49
    a = calibrate_stage2(epsilon, DELTA, hw, variant, "A", labels)
    b = calibrate_stage2(epsilon, DELTA, hw, variant, "B", labels)
    eps2 = split_budget(epsilon, variant)[1]
    assert a.eps2 == b.eps2 == eps2
    # mode A: pure, by basic composition of the recorded plan
    assert a.eps0 == pytest.approx(eps0_mode_a(eps2, a.eps_y, hw))
    assert record_level_epsilon(a.eps0, hw, a.eps_y, DELTA, "A") <= eps2 * (1 + 1e-12)
    assert plan_ledger(a.plan()).basic_epsilon() <= eps2 * (1 + 1e-12)
    assert plan_ledger(a.plan()).epsilon(DELTA) <= eps2
    # mode B: certified by a fresh ledger holding the plan at delta, and nearly tight
    assert b.certified_epsilon <= eps2
    assert plan_ledger(b.plan()).epsilon(DELTA) <= eps2
    assert record_level_epsilon(b.eps0 * 1.01, hw, b.eps_y, DELTA, "B") > eps2
    assert b.eps0 >= a.eps0
    led = PrivacyLedger("replace_one")
    assert led.start(b.plan(), Budget(eps2, DELTA)) <= eps2  # the pipeline's declaration is accepted ...
    with pytest.raises(BudgetExceededError):  # ... and a larger eps0 is refused
        PrivacyLedger("replace_one").start(stage2_plan(b.eps0 * 1.01, hw, b.eps_y), Budget(eps2, DELTA))


def test_plan_records_hw_em_draws_with_their_count():
    plan = stage2_plan(0.5, 49, 0.1)
    assert plan == [(ExponentialMechanismEvent(0.5, "replace_one"), 49), (PureDpEvent(0.1, "replace_one"), 1)]
    led = plan_ledger(plan)
    assert [(e.event.kind, e.count) for e in led.entries] == [("exponential_mechanism", 49), ("pure_dp", 1)]
    one = plan_ledger(stage2_plan(0.5, 1, 0.1)).epsilon(DELTA)
    many = led.epsilon(DELTA)
    assert many > 10 * one  # the count is composed (dp-accounting 0.6's self-composed RR trap would give one copy)
    assert plan_ledger(stage2_plan(0.5, 49, 0.0)).epsilon(DELTA) == pytest.approx(18.6, abs=0.05)
    assert record_level_epsilon(0.5, 49, 0.0, DELTA, "B") > record_level_epsilon(0.5, 1, 0.0, DELTA, "B") * 10


def test_mode_b_with_a_prefix_certifies_the_joint_ledger():
    prefix = [(PureDpEvent(1.0), 1)]
    alone, _ = eps0_mode_b(3.0, 0.5, 49, DELTA)
    joint, certified = eps0_mode_b(3.0, 0.5, 49, DELTA, prefix=prefix)
    assert joint < alone and certified <= 3.0
    assert plan_ledger([*prefix, *stage2_plan(joint, 49, 0.5)]).epsilon(DELTA) <= 3.0


# ----------------------------------------------------------------------------- ε = ∞ and diagnostics
def test_infinite_epsilon_is_the_non_private_reference():
    rng = np.random.default_rng(7)
    R = 1.0
    tokens, codes = rng.normal(size=(6, 9, 4)), rng.normal(size=(12, 4))
    b = calibrate_stage2(math.inf, DELTA, 9, "fp", "B")
    assert b.eps0 == math.inf and b.eps_y == math.inf and not b.private
    rep = b.report()
    json.dumps(rep, allow_nan=False)  # no NaN, no infinity in the report
    assert rep["note"] == NOT_DP and rep["dp"] is False
    assert b.plan() == [(NonPrivateEvent(NOT_DP), 1)]
    assert plan_ledger(b.plan()).epsilon(DELTA) == math.inf
    assert record_level_epsilon(math.inf, 9, 0.5, DELTA, "A") == math.inf
    want = np.argmin(((project_ball(tokens, R)[:, :, None] - project_ball(codes, R)) ** 2).sum(-1), -1)
    z = release_tokens(tokens, codes, b.eps0, R, rng.uniform(size=(6, 9, 12)))
    np.testing.assert_array_equal(z, want)
    np.testing.assert_array_equal(argmin_tokens(tokens, codes, R), want)
    y = rng.integers(0, 10, 30)
    np.testing.assert_array_equal(rr_labels(y, b.eps_y, 10, rng.uniform(size=30)), y)
    np.testing.assert_array_equal(rr_law(math.inf, 4), np.eye(4))
    with pytest.raises(ValueError):
        em_logits(tokens, codes, math.inf, R)
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError):
            em_logits(tokens, codes, bad, R)
    assert calibrate_stage2(math.inf, DELTA, 9, "pp", "A", "public").eps_y == 0.0


def test_peakedness_diagnostics():
    rng = np.random.default_rng(8)
    K = 64
    flat = em_peakedness(np.full((3, 5, K), 1 / K), np.zeros((3, 5), np.int64))
    assert flat["argmin_probability"] == pytest.approx(1 / K) and flat["token_entropy_bits"] == pytest.approx(6.0)
    onehot = np.zeros((2, 3, K))
    onehot[..., 7] = 1
    sharp = em_peakedness(onehot, np.full((2, 3), 7))
    assert sharp["argmin_probability"] == 1.0 and sharp["token_entropy_bits"] == 0.0
    # the ideal geometry (nearest code at the token, all others antipodal) matches the closed form
    c = _sphere(rng, 1, 6, 1.0)[0]
    codes = np.concatenate([c[None], np.repeat(-c[None], K - 1, 0)])
    eps0 = 2.0 / 49
    p = em_probabilities(em_logits(c[None, None], codes, eps0, 1.0))
    assert p[0, 0, 0] == pytest.approx(ideal_argmin_probability(eps0, K), rel=1e-7)
    # honest calibration at the paper's budget gives near-uniform tokens
    tokens, cb = rng.normal(size=(20, 49, 6)), rng.normal(size=(K, 6))
    b = calibrate_stage2(10.0, DELTA, 49, "fp", "B")
    peak = em_peakedness(em_probabilities(em_logits(tokens, cb, b.eps0, 1.0)), argmin_tokens(tokens, cb, 1.0))
    assert peak["argmin_probability"] < 1.1 / K and peak["token_entropy_bits"] > 0.999 * math.log2(K)


# ----------------------------------------------------------------------------- the negative result's arithmetic
def test_feasibility_numbers_of_the_docs():
    """The numbers docs/tutorials/generative.md and the pipeline's docstring state, from the mechanism's functions:
    K = 1024 codes, HW = 49 locations, δ = 1e-5."""
    K, hw = 1024, 49
    assert ideal_argmin_probability(0.06, K) == pytest.approx(0.001006, abs=5e-7)  # against 1/K = 0.000977
    assert 1 / K == pytest.approx(0.000977, abs=5e-7)
    f = feasibility(K, hw, DELTA)
    assert f["eps0"] == pytest.approx(2 * math.log(K - 1)) == pytest.approx(13.861, abs=5e-4)
    assert ideal_argmin_probability(f["eps0"], K) == pytest.approx(0.5)
    assert f["record_epsilon_basic"] == pytest.approx(679.19, abs=5e-3)
    assert f["record_epsilon_pld"] == pytest.approx(679.19, abs=5e-3)  # PLD saves nothing at this ε₀
    assert eps0_for_ideal_probability(0.9, K) == pytest.approx(2 * math.log(9 * 1023))
    # the Stage II budgets at ε = 10 (Stage II alone): FP mode A, FP mode B, PP mode A, PP mode B
    got = [calibrate_stage2(10.0, DELTA, hw, v, m).eps0 for v, m in (("fp", "A"), ("fp", "B"), ("pp", "A"), ("pp", "B"))]
    assert got == pytest.approx([0.0306, 0.058, 0.153, 0.235], abs=5e-4)
    assert [ideal_argmin_probability(e, K) for e in got] == pytest.approx([0.000992, 0.001005, 0.001054, 0.001098],
                                                                          abs=5e-7)
    # the paper's route: the whole ε₂ per draw with Δu = 4 while R ≠ 1 makes the logit range ε₂R²/2, so a 50 % hit
    # at ε₂ = 2 takes R² = 6.93: the release's honest per-location ε is then ε₂R² = 13.86, 679 per record
    assert f["eps0"] / 2.0 == pytest.approx(6.93, abs=5e-3)
    with pytest.raises(ValueError):
        eps0_for_ideal_probability(1 / K, K)


# ----------------------------------------------------------------------------- mode A fills the target
@pytest.mark.parametrize("variant,epsilon", [("fp", 1.0), ("pp", 1.0), ("pp", 10.0),
                                             pytest.param("fp", 10.0, marks=pytest.mark.slow)])
def test_mode_a_fill_certifies_the_target_on_the_joint_ledger(variant, epsilon):
    """Mode A's declared split certifies less than ε on the joint ledger (PLD composes more tightly than basic
    composition); the fill scales ε₀ and ε_y by one factor until the joint ledger certifies ≥ 0.99 ε, never above
    (the CPU profile's Stage I: 300 rounds at q = 64/2,000)."""
    from sstq_fl.gen.vqg.pipeline import VqgConfig, plan_run

    cfg = VqgConfig(variant=variant, epsilon=epsilon)
    s = plan_run(cfg, 2000)
    b = s["budget"]
    declared = calibrate_stage2(epsilon, DELTA, 49, variant, "A")
    before = plan_ledger([*s["stage1"], *declared.plan()]).epsilon(DELTA)
    after = plan_ledger(s["plan"]).epsilon(DELTA)
    assert before < 0.95 * epsilon and 0.99 * epsilon <= after <= epsilon
    assert b.scale > 1 and b.eps0 == pytest.approx(b.scale * declared.eps0)
    assert b.eps_y == pytest.approx(b.scale * declared.eps_y)  # the declared 3 : 1 of tokens and labels is kept
    assert PrivacyLedger("replace_one").start(s["plan"], Budget(epsilon, DELTA)) <= epsilon
    assert plan_ledger([*s["stage1"], *stage2_plan(b.eps0 * 1.01, 49, b.eps_y * 1.01)]).epsilon(DELTA) > epsilon
    assert fill_mode_a(calibrate_stage2(epsilon, DELTA, 49, variant, "B")).scale == 1.0  # mode B is left alone
