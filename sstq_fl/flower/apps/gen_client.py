"""The client side of the DP generative workloads (:mod:`sstq_fl.gen.runner`), a ``train.gen`` handler.

A message names a registered client task, carries the broadcast arrays (``ArrayRecord``) and
scalars (``ConfigRecord``: the task's config as JSON, the workload's data spec, seed and round).
The client loads **its own** partition of the private records, runs the task and replies with
arrays only: no pickle, nothing executable crosses the wire.

The task config carries the run's randomness mode.  In ``secure`` mode the task's protective
coins (record sampling, randomized response) come from a key this client draws from its own OS
CSPRNG for the request (:class:`sstq_fl.gen.runner.ClientContext`); the key never leaves the
client and is never logged, so the server's seed says nothing about them.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict


def run_task(msg: Message, context: Context) -> Message:
    """Run the message's client task on this node's partition; reply with its arrays."""
    from sstq_fl.data.workload import WorkloadData
    from sstq_fl.gen.runner import run_client_task

    conf: Any = msg.content["request"]
    pid = int(context.node_config["partition-id"])
    data = WorkloadData.from_json(str(conf["data"]))
    payload = {k: np.asarray(v.numpy()) for k, v in msg.content.array_records["payload"].items()} \
        if "payload" in msg.content.array_records else {}
    out = run_client_task(data, pid, str(conf["task"]), payload, json.loads(str(conf["config"])), int(conf["seed"]),
                          int(conf["round"]))
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in out.items()})
    return Message(RecordDict({"result": arrays, "meta": ConfigRecord({"partition-id": pid})}), reply_to=msg)
