"""The partitioners (flwr-datasets' names and meaning): each one's stated property and its one-line errors."""

import os

import numpy as np
import pytest

from sstq_fl import rng
from sstq_fl.config.partition import PartitionOptions
from sstq_fl.data import partitioners as P
from sstq_fl.data.partitioners import PARTITIONERS, dirichlet_shards, iid_shards

LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 200))  # 2,000 records, 10 classes
FMNIST = os.path.isdir("/usr/share/datasets/fashion-mnist")

def old_dirichlet_shards(labels, clients, alpha, seed):
    """The Dirichlet split as it was before the partitioners (one draw, no minimum): results made with it
    must stay reproducible."""
    gen = np.random.Generator(np.random.Philox(key=rng.derive_seed(seed, 0xD1)))
    parts = [[] for _ in range(clients)]
    for c in np.unique(labels):
        idx = np.nonzero(labels == c)[0]
        idx = idx[gen.permutation(len(idx))]
        cuts = (np.cumsum(gen.dirichlet(np.full(clients, alpha))) * len(idx)).astype(int)[:-1]
        for k, chunk in enumerate(np.split(idx, cuts)):
            parts[k].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def disjoint_sorted(shards, n):
    """The shards are sorted, disjoint record indices in ``0..n-1``; returns their union."""
    assert all(np.array_equal(s, np.sort(s)) for s in shards)
    union = np.concatenate(shards)
    assert len(np.unique(union)) == len(union) and (union.size == 0 or 0 <= union.min() <= union.max() < n)
    return np.sort(union)


def one_line_error(fn, *args, match, **kwargs):
    with pytest.raises(ValueError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["iid", "dirichlet", "shard", "pathological", "natural-id"])
def test_every_partitioner_is_disjoint_sorted_and_a_function_of_the_seed(name):
    opts = PartitionOptions(natural_ids=np.arange(len(LABELS)) % 8)
    a, b = (PARTITIONERS[name](LABELS, 8, 3, opts) for _ in range(2))
    assert len(a) == 8 and all(np.array_equal(x, y) for x, y in zip(a, b))
    disjoint_sorted(a, len(LABELS))
    if name != "natural-id":  # the only one without randomness
        assert not all(np.array_equal(x, y) for x, y in zip(a, PARTITIONERS[name](LABELS, 8, 4, opts)))


def test_iid_is_todays_iid_shards_complete_with_sizes_within_one():
    shards = P.iid(LABELS[:1003], 10, 4, PartitionOptions())
    assert all(np.array_equal(x, y) for x, y in zip(shards, iid_shards(1003, 10, 4)))
    assert np.array_equal(disjoint_sorted(shards, 1003), np.arange(1003)) and {len(s) for s in shards} == {100, 101}


def test_dirichlet_is_the_old_split_when_its_first_draw_meets_the_minimum():
    for labels, clients, alpha, seed in ((LABELS, 20, 0.2, 0), (np.repeat(np.arange(10), 300), 10, 0.5, 0)):
        old = old_dirichlet_shards(labels, clients, alpha, seed)
        assert min(len(s) for s in old) >= 10
        new = P.dirichlet(labels, clients, seed, PartitionOptions(alpha=alpha))
        assert all(np.array_equal(x, y) for x, y in zip(old, new))


def test_dirichlet_redraws_until_every_client_has_min_partition_size_records():
    old = old_dirichlet_shards(LABELS, 20, 0.1, 4)
    assert min(len(s) for s in old) < 10  # the first draw fails the minimum: the partition is drawn again
    shards = P.dirichlet(LABELS, 20, 4, PartitionOptions(alpha=0.1, min_partition_size=10))
    assert np.array_equal(disjoint_sorted(shards, len(LABELS)), np.arange(len(LABELS)))
    assert min(len(s) for s in shards) >= 10


def test_dirichlet_is_label_skewed_at_small_alpha_and_balanced_by_self_balancing():
    dominant = [np.bincount(LABELS[s], minlength=10).max() / len(s)
                for s in P.dirichlet(LABELS, 10, 1, PartitionOptions(alpha=0.1, min_partition_size=1))]
    assert np.median(dominant) > 0.5
    spread = {b: np.mean([np.std([len(s) for s in P.dirichlet(LABELS, 10, seed, PartitionOptions(
        alpha=0.3, min_partition_size=0, self_balancing=b))]) for seed in range(8)]) for b in (False, True)}
    assert spread[True] < spread[False]


def test_dirichlet_refuses_in_one_line_what_it_cannot_do():
    one_line_error(P.dirichlet, LABELS, 20, 0, PartitionOptions(alpha=0.05), match=r"11 draws with alpha=0.05 over 20 "
                   r"clients each left a client under min-partition-size 10 records; raise alpha")
    one_line_error(P.dirichlet, LABELS, 20, 0, PartitionOptions(min_partition_size=101), match="exceeds the 2000 records")
    one_line_error(PartitionOptions, alpha=0.0, match="alpha must be a finite positive number, got 0.0")  # declared
    one_line_error(P.dirichlet, LABELS.astype(np.float32), 20, 0, PartitionOptions(), match="integer class labels")


def test_shard_gives_each_client_shards_per_client_label_sorted_shards():
    for m in (1, 2, 4):
        shards = P.shard(LABELS, 10, 0, PartitionOptions(shards_per_client=m))
        size = len(LABELS) // (10 * m)  # 200 / size shards per class: none straddles two classes
        assert np.array_equal(disjoint_sorted(shards, len(LABELS)), np.arange(len(LABELS)))
        assert all(len(s) == m * size for s in shards)
        assert all(len(np.unique(LABELS[s])) <= m for s in shards)
    shards = P.shard(LABELS[:1003], 10, 0, PartitionOptions(shards_per_client=2))  # shards of 50; 3 records left out
    assert len(disjoint_sorted(shards, 1003)) == 1000 and {len(s) for s in shards} == {100}
    one_line_error(P.shard, LABELS[:30], 10, 0, PartitionOptions(shards_per_client=4), match="exceeds the 30 records")


def test_pathological_gives_each_client_exactly_classes_per_client_labels():
    for k in (1, 2, 3, 10):
        shards = P.pathological(LABELS, 20, 5, PartitionOptions(classes_per_client=k))
        assert all(len(np.unique(LABELS[s])) == k for s in shards)
        held = disjoint_sorted(shards, len(LABELS))
        assert np.array_equal(held, np.nonzero(np.isin(LABELS, np.unique(LABELS[held])))[0])  # whole classes
    sizes = [np.bincount(LABELS[s], minlength=10) for s in P.pathological(LABELS, 20, 5, PartitionOptions())]
    for c in range(10):
        share = [n[c] for n in sizes if n[c]]
        assert not share or max(share) - min(share) <= 1  # a class is split evenly among its holders
    one_line_error(P.pathological, LABELS, 20, 0, PartitionOptions(classes_per_client=11), match=r"must be in 1\.\.10")
    one_line_error(P.pathological, np.array([0, 1] * 5 + [2]), 10, 0, PartitionOptions(classes_per_client=3),
                   match="class 0 has 5 records but 10 clients hold it")


def test_natural_id_gives_client_k_the_records_of_the_kth_sorted_id():
    ids = np.random.default_rng(1).choice(np.array(["carol", "alice", "bob", "dave"]), size=500)
    shards = P.natural_id(np.zeros(500), 4, 0, PartitionOptions(natural_ids=ids))
    for k, who in enumerate(["alice", "bob", "carol", "dave"]):
        assert np.array_equal(shards[k], np.nonzero(ids == who)[0])
    one_line_error(P.natural_id, np.zeros(500), 5, 0, PartitionOptions(natural_ids=ids),
                   match="has 4 distinct natural ids but the run has 5 clients")
    one_line_error(P.natural_id, np.zeros(500), 4, 0, PartitionOptions(), match="needs the task's natural_ids")
    one_line_error(P.natural_id, np.zeros(400), 4, 0, PartitionOptions(natural_ids=ids), match="one id per training")


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


def test_the_registry_holds_the_declared_partitions():
    """The options declare the partition vocabulary (:data:`sstq_fl.config.partition.PARTITIONS`); the registry
    implements exactly those, and a DP generative pipeline's names are a subset of them."""
    from sstq_fl.config.partition import GEN_PARTITIONS, PARTITIONS

    assert sorted(PARTITIONERS.names()) == sorted(PARTITIONS) and set(GEN_PARTITIONS) <= set(PARTITIONS)
