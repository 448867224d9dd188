"""How the training records are split among clients: the partitioners, by name (:data:`PARTITIONERS`).

The names and their meaning follow flwr-datasets' partitioners (Flower, flwr-datasets 0.5):
``iid`` (IidPartitioner), ``dirichlet`` (DirichletPartitioner), ``shard`` (ShardPartitioner),
``pathological`` (PathologicalPartitioner, its "random" class assignment) and ``natural-id``
(NaturalIdPartitioner).  Each is one function ``(labels, clients, seed, options) -> shards``: the
sorted, disjoint record-index arrays of clients ``0..clients-1``, a function of ``seed`` alone (each
draws from its own :func:`~sstq_fl.rng.derive_seed` stream).  A run's partition is
:func:`sstq_fl.fl.clients.partition_for`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import rng
from ..config.partition import PartitionOptions
from ..registry import Registry

DIRICHLET_DRAWS = 11
"""The most draws the Dirichlet partitioner makes before giving up (flwr-datasets: the first and 10 more)."""


Partitioner = Callable[[np.ndarray, int, int, PartitionOptions], list[np.ndarray]]
"""``partitioner(labels, clients, seed, options) -> shards`` (see the module's docstring)."""

PARTITIONERS: Registry[Partitioner] = Registry("partitioner", accepts=callable,
                                               kind="a partitioner (labels, clients, seed, options) -> shards")
"""The partitioners by name; the built-ins, one per name of :data:`~sstq_fl.config.partition.PARTITIONS`, are
registered in this module (no ``builtins=`` modules)."""


def _generator(seed: int, tag: int) -> np.random.Generator:
    """A NumPy generator on its own Philox stream ``derive_seed(seed, tag)``."""
    return np.random.Generator(np.random.Philox(key=rng.derive_seed(seed, tag)))


def _check_clients(n_records: int, clients: int) -> None:
    if not 1 <= clients <= n_records:
        raise ValueError(f"cannot split {n_records} records over {clients} clients")


def _class_labels(labels: np.ndarray, name: str) -> np.ndarray:
    """``labels`` as a 1-D integer array; a label-based partitioner on other labels is a one-line error."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or not (np.issubdtype(labels.dtype, np.integer) or labels.dtype == bool):
        raise ValueError(f"partition {name} splits by class and needs 1-D integer class labels, got {labels.dtype} "
                         f"labels of shape {labels.shape} (a regression task? use partition iid)")
    return labels


# ----------------------------------------------------------------------------- iid
def iid_shards(n_records: int, clients: int, seed: int) -> list[np.ndarray]:
    """Disjoint IID shards of (almost) equal size: a seeded permutation split evenly."""
    _check_clients(n_records, clients)
    keys = rng.raw_bits(np.array([rng.derive_seed(seed, 0xA11)], np.uint64), "iid-permutation", n_records)[0]
    return [np.sort(s) for s in np.array_split(np.argsort(keys, kind="stable"), clients)]


@PARTITIONERS.register("iid")
def iid(labels: np.ndarray, clients: int, seed: int, options: PartitionOptions) -> list[np.ndarray]:
    """flwr-datasets' IidPartitioner: a uniformly random permutation of the ``n`` records cut into
    ``clients`` contiguous runs of ``⌊n/clients⌋`` or ``⌈n/clients⌉`` records (:func:`iid_shards`)."""
    return iid_shards(len(labels), clients, seed)


# ----------------------------------------------------------------------------- dirichlet
def _balanced(p: np.ndarray, sizes: np.ndarray, mean: float) -> np.ndarray:
    """flwr-datasets' self-balancing: no share of this class to a client already above ``mean`` records;
    the other shares renormalised to sum to one (unchanged if that would leave none)."""
    q = np.where(sizes > mean, 0.0, p)
    return q / q.sum() if q.sum() > 0 else p


def _dirichlet_draw(gen: np.random.Generator, labels: np.ndarray, clients: int, alpha: float,
                    self_balancing: bool) -> list[np.ndarray]:
    """One draw: for each class ``c`` (ascending), its records in a random order, then proportions
    ``p ~ Dir(α·1)`` and client ``k`` gets the records between ``⌊n_c·Σ_{j<k} p_j⌋`` and ``⌊n_c·Σ_{j≤k} p_j⌋``."""
    parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
    sizes, mean = np.zeros(clients, np.int64), len(labels) / clients
    for c in np.unique(labels):
        idx = np.nonzero(labels == c)[0]
        idx = idx[gen.permutation(len(idx))]
        p = gen.dirichlet(np.full(clients, alpha))
        if self_balancing:
            p = _balanced(p, sizes, mean)
        cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
        for k, chunk in enumerate(np.split(idx, cuts)):
            parts[k].append(chunk)
            sizes[k] += len(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


@PARTITIONERS.register("dirichlet")
def dirichlet(labels: np.ndarray, clients: int, seed: int, options: PartitionOptions) -> list[np.ndarray]:
    """flwr-datasets' DirichletPartitioner (Hsu, Qi & Brown 2019, "Measuring the effects of non-identical
    data distribution"): each class is split over the clients by its own ``Dir(α·1)`` proportions
    (:func:`_dirichlet_draw`; ``self_balancing`` as flwr-datasets).  The whole partition is drawn again,
    from the same stream, until every client holds at least ``min_partition_size`` records, at most
    :data:`DIRICHLET_DRAWS` draws; small α gives strong label skew."""
    alpha, least = options.alpha, options.min_partition_size
    if not (alpha > 0 and np.isfinite(alpha)):
        raise ValueError(f"Dirichlet alpha must be positive and finite, got {alpha}")
    labels = _class_labels(labels, "dirichlet")
    _check_clients(len(labels), clients)
    if clients * least > len(labels):
        raise ValueError(f"dirichlet partition: {clients} clients x min-partition-size {least} exceeds the "
                         f"{len(labels)} records; lower min-partition-size or use fewer clients")
    gen = _generator(seed, 0xD1)
    for _ in range(DIRICHLET_DRAWS):
        shards = _dirichlet_draw(gen, labels, clients, alpha, options.self_balancing)
        if min(len(s) for s in shards) >= least:
            return shards
    raise ValueError(f"dirichlet partition: {DIRICHLET_DRAWS} draws with alpha={alpha} over {clients} clients each "
                     f"left a client under min-partition-size {least} records; raise alpha, lower min-partition-size "
                     f"or use fewer clients")


def dirichlet_shards(labels: np.ndarray, clients: int, alpha: float, seed: int) -> list[np.ndarray]:
    """:func:`dirichlet` with ``min_partition_size=1`` (no client without data), for callers without options."""
    return dirichlet(labels, clients, seed, PartitionOptions(alpha=alpha, min_partition_size=1))


# ----------------------------------------------------------------------------- shard
@PARTITIONERS.register("shard")
def shard(labels: np.ndarray, clients: int, seed: int, options: PartitionOptions) -> list[np.ndarray]:
    """flwr-datasets' ShardPartitioner, McMahan et al. (AISTATS 2017)'s pathological non-IID split: the
    records sorted by label (stably) are cut into shards of ``s = ⌊n / (clients·m)⌋`` consecutive records
    (``m = shards_per_client``); ``clients·m`` of the ``⌊n/s⌋`` shards, chosen at random, are dealt ``m`` to
    each client.  Every client holds ``m·s`` records, of at most ``m`` labels unless a shard straddles two
    classes; the ``n - clients·m·s`` records of unused shards (and the incomplete last one) are left out."""
    labels = _class_labels(labels, "shard")
    m, n = options.shards_per_client, len(labels)
    size = n // (clients * m) if clients >= 1 and m >= 1 else 0
    if size < 1:
        raise ValueError(f"shard partition: {clients} clients x shards-per-client {m} exceeds the {n} records; "
                         f"lower shards-per-client or use fewer clients")
    order = np.argsort(labels, kind="stable")
    chosen = _generator(seed, 0x5AD).permutation(n // size)[: clients * m].reshape(clients, m)
    return [np.sort(np.concatenate([order[j * size : (j + 1) * size] for j in row])) for row in chosen]


# ----------------------------------------------------------------------------- pathological
def _holders(classes: int, clients: int, k: int, seed: int) -> np.ndarray:
    """``[clients, k]`` class indices: each client's ``k`` distinct classes, uniformly at random."""
    gen = _generator(seed, 0x9A7)
    return np.stack([gen.choice(classes, size=k, replace=False) for _ in range(clients)])


@PARTITIONERS.register("pathological")
def pathological(labels: np.ndarray, clients: int, seed: int, options: PartitionOptions) -> list[np.ndarray]:
    """flwr-datasets' PathologicalPartitioner ("random" class assignment; Li et al., ICDE 2022,
    "Federated learning on non-IID data silos"): each client draws ``classes_per_client`` distinct
    classes uniformly at random; the records of class ``c`` are split, in record order, into ``h_c``
    near-equal runs (``h_c``: how many clients hold ``c``), one per holder in client order.  Every client
    holds exactly ``classes_per_client`` labels; classes nobody drew are left out."""
    labels, k = _class_labels(labels, "pathological"), options.classes_per_client
    _check_clients(len(labels), clients)
    classes, counts = np.unique(labels, return_counts=True)
    if not 1 <= k <= len(classes):
        raise ValueError(f"pathological partition: classes-per-client {k} must be in 1..{len(classes)} (the classes "
                         f"in the data)")
    held = _holders(len(classes), clients, k, seed)
    holders = [np.nonzero((held == c).any(1))[0] for c in range(len(classes))]
    short = [c for c in range(len(classes)) if len(holders[c]) > counts[c]]
    if short:
        c = short[0]
        raise ValueError(f"pathological partition: class {classes[c]} has {counts[c]} records but {len(holders[c])} "
                         f"clients hold it; lower classes-per-client or use fewer clients")
    parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for c, who in ((c, who) for c, who in enumerate(holders) if len(who)):
        for client, run in zip(who, np.array_split(np.nonzero(labels == classes[c])[0], len(who))):
            parts[client].append(run)
    return [np.sort(np.concatenate(p)) for p in parts]


# ----------------------------------------------------------------------------- natural-id
@PARTITIONERS.register("natural-id")
def natural_id(labels: np.ndarray, clients: int, seed: int, options: PartitionOptions) -> list[np.ndarray]:
    """flwr-datasets' NaturalIdPartitioner: one client per distinct value of the records' natural ids
    (the writer, the user, the device: ``options.natural_ids``, one per record), client ``k`` holding
    exactly the records whose id is the ``k``-th smallest.  No randomness; ``seed`` is unused."""
    ids = options.natural_ids
    if ids is None:
        raise ValueError("partition natural-id needs the task's natural_ids (one id per training record); this task "
                         "has none")
    ids = np.asarray(ids)
    if ids.shape != (len(labels),):
        raise ValueError(f"natural_ids must be 1-D with one id per training record ({len(labels)}), got shape "
                         f"{ids.shape}")
    distinct, which = np.unique(ids, return_inverse=True)
    if len(distinct) != clients:
        raise ValueError(f"partition natural-id: the data has {len(distinct)} distinct natural ids but the run has "
                         f"{clients} clients; set clients to {len(distinct)}")
    order = np.argsort(which.reshape(-1), kind="stable")
    return np.split(order, np.cumsum(np.bincount(which.reshape(-1), minlength=clients))[:-1])
