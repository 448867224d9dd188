"""A run's partition: the partitioners are the run config's choices with declared options, and
:func:`~sstq_fl.fl.clients.partition_for` splits the task's training records on the vectorized engine."""

import os

import numpy as np
import pytest
import torch

from sstq_fl.config.train import RunConfig
from sstq_fl.data.partitioners import PARTITIONERS, iid_shards
from sstq_fl.fl.clients import partition_for

FMNIST = os.path.isdir("/usr/share/datasets/fashion-mnist")


def one_line_error(fn, *args, match, **kwargs):
    with pytest.raises(ValueError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)


def test_the_registry_holds_flwr_datasets_names_and_they_are_the_run_configs_choices():
    assert PARTITIONERS.names() == ["dirichlet", "iid", "natural-id", "pathological", "shard"]
    for name in PARTITIONERS.names():
        RunConfig(partition=name)
    one_line_error(lambda: RunConfig(partition="shards"), match="partition must be one of")


def test_the_partition_options_are_declared_with_ranges():
    for bad, why in (({"min_partition_size": -1}, "min-partition-size must be an integer ≥ 0"),
                     ({"shards_per_client": 0}, "shards-per-client must be a positive integer"),
                     ({"classes_per_client": 0}, "classes-per-client must be a positive integer"),
                     ({"alpha": 0.0}, "alpha must be a finite positive number")):
        one_line_error(RunConfig, match=why, **bad)


def test_partition_for_reads_the_tasks_labels_and_natural_ids():
    from sstq_fl.fl.engine import ClientData
    from sstq_fl.fl.tasks import make_task

    task = make_task("lsq", 0, dim=5, n=120)
    one_line_error(lambda: ClientData(RunConfig(task="lsq", clients=4, partition="shard"), task),
                   match="partition shard splits by class and needs 1-D integer class labels")
    task.natural_ids = np.arange(120) // 40  # type: ignore[attr-defined]
    shards = ClientData(RunConfig(task="lsq", clients=3, partition="natural-id"), task).shards
    assert [s.tolist() for s in shards] == [list(range(k * 40, k * 40 + 40)) for k in range(3)]
    assert partition_for(RunConfig(task="lsq", clients=3), task)[0].tolist() == iid_shards(120, 3, 0)[0].tolist()
    task.data.y_train = torch.zeros(120, dtype=torch.int64)  # one class, Dirichlet(0.01) over 60 clients
    cfg = RunConfig(task="lsq", clients=60, partition="dirichlet", alpha=0.01, min_partition_size=0)
    one_line_error(partition_for, cfg, task, match="partition dirichlet left .* of 60 clients without records")


@pytest.mark.skipif(not FMNIST, reason="dataset-fashion-mnist not installed")
@pytest.mark.parametrize("partition", ["shard", "pathological", "dirichlet"])
def test_a_label_partition_trains_a_round_of_fmnist(tmp_path, partition):
    from sstq_fl.fl.engine import run

    m = run(RunConfig(task="fmnist", encoder="clean", clients=10, rounds=1, clip=1.0, lr=0.5, partition=partition),
            tmp_path / partition, progress=False)
    assert len(m["rounds"]) == 1 and np.isfinite(m["rounds"][-1]["train_loss"])
