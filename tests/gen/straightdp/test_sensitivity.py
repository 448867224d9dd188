"""StraightDP's Stage 1 shifts are exact under add/remove: the record that maximises them is found by projected
gradient ascent over the pixel box (not sampled), fed through the real client tasks, and moves each release by
exactly the declared amount; no record, adversarial or random, moves it further."""

import math

import numpy as np
import pytest

from sstq_fl.gen.runner import ClientContext
from sstq_fl.gen.straightdp.client_tasks import class_moments, second_moment
from sstq_fl.gen.straightdp.flow import to_model_space
from sstq_fl.gen.straightdp.moments import CLASS_MOMENTS_SHIFT, norm_quantile, public_pca, second_moment_shift

D, P_DIM, CLASSES = 784, 16, 10


def _public(seed: int = 0) -> tuple[dict[str, np.ndarray], float]:
    """A public calibration from smooth random "images": PCA basis, mean and the 0.99 norm quantile ``R_f``."""
    rs = np.random.default_rng(seed)
    x = np.clip(rs.normal(0.3, 0.2, (400, 1, D)) + rs.normal(0, 0.2, (400, 1, 1)), 0, 1).reshape(400, D)
    z = to_model_space(x)
    basis, mean = public_pca(z, P_DIM)
    return {"P": basis, "m_pub": mean}, norm_quantile(z, basis, mean, 0.99)


def _outputs(records: np.ndarray, labels: np.ndarray, payload: dict, r_f: float) -> tuple[np.ndarray, np.ndarray]:
    """The two client tasks' outputs on ``records`` (pixels in [0, 1]): the joint (counts, sums_w) and ``Σ f fᵀ``."""
    ctx = ClientContext(0, records.reshape(-1, 1, 28, 28).astype(np.float32), labels, 0, 0)
    u = class_moments(ctx, payload, {"r_f": r_f, "classes": CLASSES, "bound": CLASS_MOMENTS_SHIFT})
    m2 = second_moment(ctx, payload, {"r_f": r_f, "bound": second_moment_shift(r_f)})
    return np.concatenate([u["counts"], u["sums_w"].ravel()]), m2["m2"]


def _shifts(base_x: np.ndarray, base_y: np.ndarray, rec: np.ndarray, label: int, payload: dict,
            r_f: float) -> tuple[float, float]:
    """How far adding ``rec`` to the data set moves each release (ℓ2; Frobenius for the second moment)."""
    u0, m0 = _outputs(base_x, base_y, payload, r_f)
    u1, m1 = _outputs(np.vstack([base_x, rec[None]]), np.append(base_y, label), payload, r_f)
    return float(np.linalg.norm(u1 - u0)), float(np.linalg.norm(m1 - m0))


def _adversarial_record(payload: dict, seed: int, steps: int = 200) -> np.ndarray:
    """Projected gradient ascent of ``‖P(2x − 1 − m_pub)‖²`` over ``x ∈ [0, 1]^D`` from a random start: the feature
    norm before the clip, which every shift is increasing in."""
    p, m = payload["P"], payload["m_pub"]
    x = np.random.default_rng(seed).uniform(0, 1, D)
    for _ in range(steps):
        grad = 4 * p.T @ (p @ (2 * x - 1 - m))
        x = np.clip(x + 0.5 * grad / (np.linalg.norm(grad) + 1e-12), 0, 1)
    return x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_maximising_record_moves_each_release_by_exactly_the_declared_shift(seed):
    payload, r_f = _public(seed)
    rs = np.random.default_rng(10 + seed)
    base_x, base_y = rs.uniform(0, 1, (12, D)), rs.integers(0, CLASSES, 12)
    rec = _adversarial_record(payload, seed)
    z = to_model_space(rec[None])[0]
    assert np.linalg.norm(payload["P"] @ (z - payload["m_pub"])) > 1.2 * r_f  # the ascent left the clip ball
    for label in range(CLASSES):
        du, dm = _shifts(base_x, base_y, rec, label, payload, r_f)
        assert du == pytest.approx(math.sqrt(5) / 2, rel=1e-9)  # attained: the declaration is not loose
        assert dm == pytest.approx(r_f ** 2, rel=1e-9)


def test_no_record_moves_a_release_beyond_its_declared_shift():
    payload, r_f = _public()
    rs = np.random.default_rng(5)
    base_x, base_y = rs.uniform(0, 1, (12, D)), rs.integers(0, CLASSES, 12)
    candidates = [rs.uniform(0, 1, D), rs.integers(0, 2, D).astype(float), np.zeros(D), np.ones(D),
                  *(_adversarial_record(payload, s, steps=40) for s in range(3))]
    for rec in candidates:
        du, dm = _shifts(base_x, base_y, rec, int(rs.integers(0, CLASSES)), payload, r_f)
        assert du <= CLASS_MOMENTS_SHIFT * (1 + 1e-12) and dm <= second_moment_shift(r_f) * (1 + 1e-12)


def test_the_declared_shifts_need_less_noise_than_the_replace_one_bounds():
    """The ratios the tightening buys at equal ε: 2/(√5/2) for the counts and sums, 2 for the second moment."""
    assert 2 / CLASS_MOMENTS_SHIFT == pytest.approx(1.78885, rel=1e-5)
    assert 2 * 3.0 ** 2 / second_moment_shift(3.0) == 2
    with pytest.raises(ValueError, match="R_f must be positive"):
        second_moment_shift(0.0)
