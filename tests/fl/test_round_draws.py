"""A round's draws (:mod:`sstq_fl.fl.round_draws`): minibatches, participation and the randint they use."""

import numpy as np
import pytest

from sstq_fl.data.partitioners import iid_shards
from sstq_fl.fl.round_draws import minibatch, participates


def test_minibatches_and_participation_depend_only_on_seed_round_client():
    shard = np.arange(50, 150)
    a = minibatch(shard, 64, 0, 3, 7)
    assert len(set(a)) == 64 and set(a) <= set(shard)
    assert np.array_equal(a, minibatch(shard, 64, 0, 3, 7)) and not np.array_equal(a, minibatch(shard, 64, 0, 4, 7))
    assert len(minibatch(shard[:10], 64, 0, 1, 1)) == 64
    p = np.mean([participates(0, t, 200, 0.1).mean() for t in range(50)])
    assert abs(p - 0.1) < 0.01


def test_batched_minibatches_equal_per_client_ones():
    from sstq_fl.fl.round_draws import minibatches

    shards = iid_shards(1000, 7, seed=2)
    shards[3] = shards[3][:10]  # one small shard: drawn with replacement
    clients = np.array([0, 1, 2, 3, 4, 5, 6]) * 3
    both = minibatches(shards, 16, 5, 2, clients)
    for i, c in enumerate(clients):
        assert np.array_equal(both[i], minibatch(shards[i], 16, 5, 2, int(c)))


@pytest.mark.parametrize("secure", [False, True])
def test_minibatches_are_the_per_row_draws_on_each_rows_own_seed(secure):
    """The batched gather equals drawing each row alone from its own seed: without replacement from a shard at
    least the batch, with replacement (``rng.randint`` below the shard's size) from a smaller one."""
    from sstq_fl import rng
    from sstq_fl.fl.round_draws import minibatches

    g = np.random.default_rng(3)
    shards = [g.permutation(10_000)[: int(z)] for z in g.integers(1, 40, size=200)]
    clients = g.choice(10_000, 200, replace=False)
    keys = g.integers(0, 2**63, size=(200, 4)).astype(np.uint64) if secure else None
    got = minibatches(shards, 16, 9, 4, clients, keys=keys)
    seeds = rng.derive_seeds(9, 4, clients, 0xB47) if keys is None else rng.as_seeds(keys, 200)
    for i, sh in enumerate(shards):
        if len(sh) >= 16:
            pos = rng.sample_without_replacement(seeds[i : i + 1], "minibatch", 16, len(sh))[0]
        else:
            pos = rng.randint(seeds[i : i + 1], "minibatch-small", 16, len(sh))[0]
        assert np.array_equal(got[i], sh[pos])


def test_randint_takes_one_bound_per_row():
    from sstq_fl import rng

    seeds = rng.derive_seeds(1, 2, np.arange(50), 7)
    high = np.arange(1, 51)
    both = rng.randint(seeds, "s", 9, high)
    assert all(np.array_equal(both[i], rng.randint(seeds[i : i + 1], "s", 9, int(h))[0]) for i, h in enumerate(high))
    assert (both < high[:, None]).all() and (both >= 0).all()
    with pytest.raises(ValueError, match="high must be >= 1"):
        rng.randint(seeds[:2], "s", 3, np.array([1, 0]))
