"""The records of a DP generative workload as every client loads them by itself (:class:`WorkloadData`):
the source split, a class-stratified subset, and the record-level client partition
(:func:`partition_records`: IID-stratified, Dirichlet(α) label skew or another partitioner).

Images are float32 ``[n, 1, 28, 28]`` in [0, 1]; labels are int64 ``[n]``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from .. import rng
from ..config.partition import PartitionOptions
from ..privacy.dataset_ledger import dataset_digest
from .idx import load_fashion_mnist
from .mnist import load_private_split
from .partitioners import PARTITIONERS


def _stratified_shards(labels: np.ndarray, clients: int, seed: int) -> list[np.ndarray]:
    """IID-stratified shards: sort records by (label, seeded random key) and deal them round-robin, so every
    client holds ⌊n_c/C⌋ or ⌈n_c/C⌉ records of each class c and shard sizes differ by at most one."""
    gen = np.random.Generator(np.random.Philox(key=rng.derive_seed(seed, 0x57A7)))
    order = np.lexsort((gen.random(len(labels)), labels))
    return [np.sort(order[k::clients]) for k in range(clients)]


def partition_records(labels: np.ndarray, clients: int, scheme: str = "iid", alpha: float | None = None,
                      seed: int = 0) -> list[np.ndarray]:
    """Record-level partition of the private set over ``clients`` simulated clients: ``scheme="iid"``
    (IID-stratified), ``"dirichlet"`` (each class split by Dirichlet(``alpha``) proportions, no client
    without data) or another of :data:`~sstq_fl.data.partitioners.PARTITIONERS` with its default options.
    Returns sorted, disjoint index arrays (their union is every record exactly once for iid and dirichlet)."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a non-empty 1-D integer array, got {labels.dtype} {labels.shape}")
    if not 1 <= clients <= labels.size:
        raise ValueError(f"cannot split {labels.size} records over {clients} clients")
    if scheme == "iid":
        return _stratified_shards(labels, clients, seed)
    if scheme == "dirichlet" and alpha is None:
        raise ValueError("scheme='dirichlet' needs alpha (the Dirichlet concentration)")
    if scheme not in PARTITIONERS:
        raise ValueError(f"unknown partition scheme {scheme!r} (use {', '.join(PARTITIONERS.names())})")
    options = PartitionOptions(alpha=0.5 if alpha is None else alpha, min_partition_size=1)
    return PARTITIONERS[scheme](labels, clients, seed, options)


# ----------------------------------------------------------------------------- the workload's records
@dataclass(frozen=True)
class WorkloadData:
    """What every client can load by itself: the data set, the partition and the seed.

    ``dataset``: ``mnist-subset`` (the private MNIST subset's ``priv_train``),
    ``fmnist`` (Fashion-MNIST train, the FMNIST-private configuration) or ``synthetic``
    (small Gaussian class blobs, for tests).  ``records`` keeps a class-stratified subset of
    that many records (the CPU profiles' 2,000); ``N_decl`` is the kept size.
    """

    dataset: str = "mnist-subset"
    clients: int = 4
    partition: str = "iid"
    alpha: float = 0.5
    seed: int = 0
    records: int = 0
    data_path: str = ""

    def __post_init__(self) -> None:
        if self.dataset not in ("mnist-subset", "fmnist", "synthetic"):
            raise ValueError(f"unknown dataset {self.dataset!r} (mnist-subset, fmnist or synthetic)")
        if self.clients < 1 or self.records < 0:
            raise ValueError(f"clients must be >= 1 and records >= 0, got {self.clients}, {self.records}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WorkloadData:
        return cls(**json.loads(text))

    @property
    def n_decl(self) -> int:
        return int(_records(self.to_json())[1].shape[0])

    @property
    def digest(self) -> str:
        """The private data set's digest (:func:`~sstq_fl.privacy.dataset_ledger.dataset_digest` of the whole
        source split: ``priv_train``, FMNIST train or the synthetic set), which keys its dataset ledger.

        The whole split, not the kept ``records`` subset: subsets overlap, so a record's cumulative loss is
        bounded only by charging every run on any subset of the split to one ledger."""
        return _source_digest(self.to_json())

    def client_records(self, cid: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``cid``'s own records ``(x [n,1,28,28] in [0,1], y)``."""
        if not 0 <= cid < self.clients:
            raise ValueError(f"client {cid} out of range (clients={self.clients})")
        x, y, shards = _records(self.to_json())
        return x[shards[cid]], y[shards[cid]]


def synthetic_records(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 28×28 images: class ``k`` lights a 7×7 block at a class-specific place, plus noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 10
    x = rng.uniform(0, 0.2, size=(n, 1, 28, 28)).astype(np.float32)
    for k in range(10):
        r, c = divmod(k, 4)
        x[y == k, 0, 7 * r:7 * r + 7, 7 * c:7 * c + 7] += 0.8
    return x.clip(0, 1), y.astype(np.int64)


def _stratified_subset(y: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Exactly ``k`` indices, per class in proportion to its frequency (largest remainders), seeded."""
    order = np.random.default_rng(seed).permutation(len(y))
    classes, freq = np.unique(y, return_counts=True)
    share = k * freq / len(y)
    per = np.floor(share).astype(int)
    per[np.argsort(-(share - per), kind="stable")[:k - per.sum()]] += 1
    keep = [i for c, n in zip(classes, per) for i in order[y[order] == c][:n]]
    return np.sort(np.asarray(keep, dtype=np.int64))


def _source_key(spec: str) -> str:
    """The part of a data spec that names the source split (not the subset or the partition)."""
    d = json.loads(spec)
    synthetic = d["dataset"] == "synthetic"
    return json.dumps({"dataset": d["dataset"], "data_path": d["data_path"], "records": d["records"] if synthetic else 0,
                       "seed": d["seed"] if synthetic else 0}, sort_keys=True)


@lru_cache(maxsize=2)
def _source(key: str) -> tuple[np.ndarray, np.ndarray]:
    """The whole private source split named by :func:`_source_key`."""
    d = json.loads(key)
    if d["dataset"] == "synthetic":
        return synthetic_records(d["records"] or 400, d["seed"])
    if d["dataset"] == "fmnist":
        xtr, ytr, _, _ = load_fashion_mnist(d["data_path"] or None)
        return (np.asarray(xtr, np.float32).reshape(-1, 1, 28, 28) / (255.0 if xtr.max() > 1 else 1.0)), np.asarray(ytr)
    split = load_private_split(d["data_path"] or None)
    return split.train_x, split.train_y


@lru_cache(maxsize=4)
def _source_digest(spec: str) -> str:
    return dataset_digest(*_source(_source_key(spec)))


@lru_cache(maxsize=4)
def _records(spec: str) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    d = json.loads(spec)
    x, y = _source(_source_key(spec))
    if d["records"] > len(y):
        raise ValueError(f"records {d['records']} is more than the {len(y)} private records of {d['dataset']} "
                         f"(at most {len(y)})")
    if d["records"] and d["records"] < len(y):
        keep = _stratified_subset(y, d["records"], d["seed"])
        x, y = x[keep], y[keep]
    shards = partition_records(y.astype(np.int64), d["clients"], d["partition"],
                               d["alpha"] if d["partition"] == "dirichlet" else None, d["seed"])
    return x, y.astype(np.int64), shards
