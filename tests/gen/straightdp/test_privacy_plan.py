"""StraightDP's budget: Stage 1 at its share, the joint DP-SGD bisection, THA's plan."""

import math

import numpy as np
import pytest

from sstq_fl.gen.straightdp import privacy_plan as cal
from sstq_fl.privacy.events import GaussianEvent, PoissonSampledEvent
from sstq_fl.privacy.ledger import PrivacyLedger

DELTA = 1e-5


def eps_of(plan):
    led = PrivacyLedger(cal.RELATION)
    for ev, n in plan:
        led.record(ev, n)
    return led.epsilon(DELTA)


def test_the_moment_share_is_the_declared_weights_renormalised():
    assert cal.MOMENT_SHARE == pytest.approx(0.2 / 0.85) and round(cal.MOMENT_SHARE, 3) == 0.235
    assert cal.RELATION == "add_or_remove_one"


def test_stage1_alone_meets_its_share_with_the_smallest_sigma():
    target = cal.MOMENT_SHARE * 3.0
    s1 = cal.calibrate_moments(target, DELTA)
    assert cal.moment_plan(s1) == [(GaussianEvent(s1), 2)]  # two releases, one multiplier (σ₂ = σ₁)
    assert eps_of(cal.moment_plan(s1)) <= target
    assert eps_of(cal.moment_plan(s1 * (1 - 3e-3))) > target  # smallest σ to the bisection's tolerance


def test_joint_calibration_lands_at_most_epsilon_with_the_smallest_sigma():
    eps, q, steps = 3.0, 0.05, 10
    s1 = cal.calibrate_moments(cal.MOMENT_SHARE * eps, DELTA)
    prefix = cal.moment_plan(s1)
    sigma = cal.calibrate_joint(eps, DELTA, prefix, q, steps)
    plan = [*prefix, (PoissonSampledEvent(q, GaussianEvent(sigma)), steps)]
    assert eps_of(plan) <= eps < eps_of([*prefix, (PoissonSampledEvent(q, GaussianEvent(sigma * (1 - 3e-3))), steps)])
    # the joint plan is what is calibrated: without Stage 1 the same target needs less noise
    assert cal.calibrate_joint(eps, DELTA, [], q, steps) < sigma


def test_bucket_steps_and_edges():
    assert cal.bucket_steps(10, 4) == [3, 3, 2, 2] and sum(cal.bucket_steps(2000, 4)) == 2000
    assert np.allclose(cal.bucket_edges(0.35, 4), [0.35, 0.5125, 0.675, 0.8375, 1.0])
    with pytest.raises(ValueError):
        cal.bucket_edges(1.0, 4)


def test_clip_profile_is_normalised_and_uniform_at_beta_zero():
    edges = cal.bucket_edges(0.25, 4)
    trace = lambda t: 10.0 * (1 - t) ** 2 * (1 + t)  # noqa: E731
    flat = cal.clip_profile(trace, edges, 0.0, 1.0, 0.7)
    assert np.allclose(flat, 0.7)
    shaped = cal.clip_profile(trace, edges, 1.0, 1.0, 0.7)
    assert shaped.mean() == pytest.approx(0.7) and not np.allclose(shaped, 0.7)
    mids = (edges[:-1] + edges[1:]) / 2
    raw = np.sqrt([trace(t) for t in mids]) / (1 - mids)
    assert np.allclose(shaped / shaped.mean(), raw / raw.mean())


def test_tha_plan_shares_one_noise_std_and_meets_epsilon():
    eps, q, steps = 3.0, 0.05, 8
    edges = cal.bucket_edges(0.3, 4)
    clips = np.array([0.5, 1.0, 1.5, 2.0])
    plan = cal.tha_plan(eps, DELTA, [], q, steps, edges, clips, 0.5)
    assert plan.steps == (2, 2, 2, 2)
    assert np.allclose(np.array(plan.multipliers) * clips, plan.noise_std)  # σ_k C_k = s for every bucket
    assert eps_of(plan.events(q)) <= eps
    tighter = cal.ThaPlan(plan.edges, plan.steps, plan.clips, plan.noise_std * (1 - 3e-3), 0.5)
    assert eps_of(tighter.events(q)) > eps
    assert [plan.bucket_of(s) for s in (1, 2, 3, 8)] == [0, 0, 1, 3]


@pytest.mark.slow
def test_uniform_tha_equals_the_uniform_calibration():
    """β = 0 gives every bucket the same clip, so the shared std over the clip is the uniform σ."""
    eps, q, steps = 2.0, 0.05, 20
    sigma = cal.calibrate_joint(eps, DELTA, [], q, steps)
    plan = cal.tha_plan(eps, DELTA, [], q, steps, cal.bucket_edges(0.0, 4), np.full(4, 1.3), 0.0)
    assert plan.multipliers[0] == pytest.approx(sigma, rel=5e-3) and math.isclose(plan.clips[0], 1.3)
