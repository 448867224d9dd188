import numpy as np
import pytest

from sstq_fl.fl.partition import dirichlet_shards, iid_shards, minibatch, participates


def test_iid_shards_disjoint_and_complete():
    shards = iid_shards(1003, 10, seed=4)
    allidx = np.concatenate(shards)
    assert len(allidx) == 1003 and len(np.unique(allidx)) == 1003
    assert {len(s) for s in shards} <= {100, 101}
    assert all(np.array_equal(a, b) for a, b in zip(shards, iid_shards(1003, 10, seed=4)))


def test_dirichlet_shards_are_label_skewed():
    labels = np.repeat(np.arange(10), 300)
    shards = dirichlet_shards(labels, 10, 0.1, seed=1)
    assert len(np.unique(np.concatenate(shards))) == 3000
    dominant = [np.bincount(labels[s], minlength=10).max() / len(s) for s in shards]
    assert np.median(dominant) > 0.5
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_shards(labels, 10, 0.0, seed=1)


def test_minibatches_and_participation_depend_only_on_seed_round_client():
    shard = np.arange(50, 150)
    a = minibatch(shard, 64, 0, 3, 7)
    assert len(set(a)) == 64 and set(a) <= set(shard)
    assert np.array_equal(a, minibatch(shard, 64, 0, 3, 7)) and not np.array_equal(a, minibatch(shard, 64, 0, 4, 7))
    assert len(minibatch(shard[:10], 64, 0, 1, 1)) == 64
    p = np.mean([participates(0, t, 200, 0.1).mean() for t in range(50)])
    assert abs(p - 0.1) < 0.01


def test_batched_minibatches_equal_per_client_ones():
    from sstq_fl.fl.partition import minibatches

    shards = iid_shards(1000, 7, seed=2)
    shards[3] = shards[3][:10]  # one small shard: drawn with replacement
    clients = np.array([0, 1, 2, 3, 4, 5, 6]) * 3
    both = minibatches(shards, 16, 5, 2, clients)
    for i, c in enumerate(clients):
        assert np.array_equal(both[i], minibatch(shards[i], 16, 5, 2, int(c)))
