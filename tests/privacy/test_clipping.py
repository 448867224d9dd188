"""``clip_rows``: the norm bound that every sensitivity in the DP pipelines rests on."""

from __future__ import annotations

import numpy as np
import pytest

from sstq_fl.privacy.clipping import clip_rows


def test_rows_over_the_bound_land_on_it_and_rows_inside_are_unchanged() -> None:
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(200, 7)) * rng.uniform(0, 3, size=(200, 1))
    out = clip_rows(rows, 1.5)
    norms, after = np.linalg.norm(rows, axis=1), np.linalg.norm(out, axis=1)
    inside = norms <= 1.5
    assert inside.any() and (~inside).any()
    np.testing.assert_array_equal(out[inside], rows[inside])
    np.testing.assert_allclose(after[~inside], 1.5, rtol=1e-12)
    # direction kept: the clipped row is a positive multiple of the input
    np.testing.assert_allclose(out[~inside] / after[~inside, None], rows[~inside] / norms[~inside, None], rtol=1e-12)


@pytest.mark.parametrize("shape", [(5, 3, 4), (5, 12)])
def test_a_row_of_any_shape_is_one_vector(shape: tuple[int, ...]) -> None:
    rows = np.random.default_rng(1).normal(size=shape) * 10
    out = clip_rows(rows, 2.0)
    assert out.shape == rows.shape
    np.testing.assert_allclose(np.linalg.norm(out.reshape(5, -1), axis=1), 2.0, rtol=1e-12)


def test_zero_rows_stay_zero() -> None:
    out = clip_rows(np.zeros((3, 4)), 0.5)
    assert np.all(out == 0) and np.all(np.isfinite(out))
