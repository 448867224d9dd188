import numpy as np
import pytest

from sstq_fl import rng


def test_draws_depend_only_on_own_seed():
    seeds = np.array([5, 17, 99, 3], np.uint64)
    batch = rng.uniform(seeds, "s", 7)
    for i, s in enumerate(seeds):
        assert np.array_equal(rng.uniform(np.array([s], np.uint64), "s", 7)[0], batch[i])
    assert not np.array_equal(rng.uniform(seeds, "s", 7), rng.uniform(seeds, "t", 7))


def test_uniform_moments_and_range():
    u = rng.uniform(np.arange(200, dtype=np.uint64), "m", 500).ravel()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002


def test_normal_moments():
    z = rng.normal(np.arange(100, dtype=np.uint64), "n", 1001).ravel()
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01


def test_without_replacement_distinct_and_uniform():
    idx = rng.sample_without_replacement(np.arange(20000, dtype=np.uint64), "w", 4, 10)
    assert all(len(set(r)) == 4 for r in idx[:500])
    counts = np.bincount(idx.ravel(), minlength=10) / idx.size
    assert np.allclose(counts, 0.1, atol=0.005)


def test_derive_seed_distinct_and_validated():
    seeds = {rng.derive_seed(0, r, c) for r in range(20) for c in range(20)}
    assert len(seeds) == 400
    with pytest.raises(ValueError, match="non-negative"):
        rng.derive_seed(-1)
    with pytest.raises(ValueError, match="seeds"):
        rng.as_seeds(np.array([[1, 2]]))


def test_vectorised_seed_derivation_matches_scalar():
    clients = np.array([0, 5, 17, 2**40])
    vec = rng.derive_seeds(3, 9, clients, 0xB47)
    assert [int(v) for v in vec] == [rng.derive_seed(3, 9, int(c), 0xB47) for c in clients]


def test_without_replacement_with_per_row_sizes():
    seeds = np.arange(6, dtype=np.uint64)
    sizes = np.array([5, 10, 64, 5, 100, 7])
    both = rng.sample_without_replacement(seeds, "w", 5, sizes)
    for i in range(6):
        alone = rng.sample_without_replacement(seeds[i : i + 1], "w", 5, int(sizes[i]))[0]
        assert np.array_equal(alone, both[i]) and len(set(both[i])) == 5 and both[i].max() < sizes[i]
