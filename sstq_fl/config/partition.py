"""How records are split among clients: the partition vocabulary and the partitioners' parameters, declared once.

The names and their meaning follow flwr-datasets' partitioners (Flower, flwr-datasets 0.5): ``iid``
(IidPartitioner), ``dirichlet`` (DirichletPartitioner), ``shard`` (ShardPartitioner), ``pathological``
(PathologicalPartitioner, its "random" class assignment) and ``natural-id`` (NaturalIdPartitioner).  The
partitioner registry (:data:`sstq_fl.data.partitioners.PARTITIONERS`) holds one function per name of
:data:`PARTITIONS`; the training run (:class:`~sstq_fl.config.train.RunConfig`) takes every one of them, a DP
generative pipeline (:class:`~sstq_fl.config.generative.PipelineConfig`) the label-only ones,
:data:`GEN_PARTITIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .declare import Options, declared, option

PARTITION_MEANINGS = {
    "iid": "equal random shards",
    "dirichlet": "each class split by Dirichlet(alpha) proportions",
    "shard": "label-sorted shards, shards-per-client each",
    "pathological": "classes-per-client random classes each",
    "natural-id": "one client per distinct id of the task's natural_ids",
}
"""Each partitioner's name and what it does."""
PARTITIONS = tuple(PARTITION_MEANINGS)
"""Every partitioner's name (the training run's ``partition`` choices)."""
GEN_PARTITIONS = ("iid", "dirichlet")
"""The partitioners a DP generative pipeline's records take: those that need the class labels alone."""


def partition_help(names: tuple[str, ...], what: str) -> str:
    """The ``partition`` option's help: how ``what`` are split, each name of ``names`` with its meaning."""
    words = ", ".join(f"{n} ({PARTITION_MEANINGS[n]})" for n in names)
    return f"how {what} are split among clients, as flwr-datasets' partitioners: {words}"


@dataclass(frozen=True)
class PartitionOptions(Options):
    """The partitioners' parameters (each partitioner uses those of its own); the training run holds the same
    options (:class:`~sstq_fl.config.train.RunConfig`, from these declarations).

    ``natural_ids``: one id per training record (``natural-id``; a task's optional ``natural_ids``)."""

    alpha: float = option(0.5, help="dirichlet partition: concentration (small: strong label skew)", low=0,
                          strict_low=True, finite=True)
    min_partition_size: int = option(10, low=0, help="dirichlet partition: the partition is drawn again (at most 11 "
                                                      "draws) until every client holds at least this many records")
    self_balancing: bool = option(False, help="dirichlet partition: give no more of a class to a client already "
                                              "above the mean share of records (flwr-datasets' self_balancing)")
    shards_per_client: int = option(2, low=1, help="shard partition: label-sorted shards per client")
    classes_per_client: int = option(2, low=1, help="pathological partition: distinct classes per client")
    natural_ids: np.ndarray | None = None

    @classmethod
    def of(cls, cfg: Any, natural_ids: np.ndarray | None = None) -> PartitionOptions:
        """The partition options a config holds (its fields of these names), with ``natural_ids``."""
        return cls(**{f.name: getattr(cfg, f.name) for f, _ in declared(cls)}, natural_ids=natural_ids)
