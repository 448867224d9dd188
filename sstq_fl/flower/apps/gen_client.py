"""The client side of the DP generative workloads (:mod:`sstq_fl.gen.runner`), a ``train.gen`` handler.

A message names a registered client task, carries the broadcast arrays (``ArrayRecord``) and
scalars (``ConfigRecord``: the task's config as JSON, the workload's data spec, seed and round).
The client loads **its own** partition of the private records, runs the task and replies with
arrays only: no pickle, nothing executable crosses the wire.

**Every reply passes the client's own ledger** (:mod:`sstq_fl.flower.client_ledger`), by what the task
declares it releases (:mod:`sstq_fl.gen.releases`):

* an LDP release (randomized response on labels, EM tokens) is charged with the event the client computes
  from the parameters it applied, before the reply leaves, and refused past any declared budget;
* a sum for a trusted aggregator is sent only where the node operator opted in (node config
  :data:`TRUST_AGGREGATOR` ``= true``; the run config and the message cannot turn it on), and is charged as
  the central event the server declares it feeds, under the same budgets;
* a share of a secure sum (``secagg.share``) is held to the same opt-in: ``train.gen`` messages run no SecAgg+
  masking, so the server would see the share itself, whose own noise is only this client's part of the total
  (``sstq-fl gen --trust secagg`` runs in-process for that reason).

A refusal is an error reply (``MOD_FAILED_PRECONDITION``, the reason in one line), as the LDP mod's: the
server leaves the client out of that release and records why.

The task config carries the run's randomness mode.  In ``secure`` mode the task's protective
coins (record sampling, randomized response) come from a key this client draws from its own OS
CSPRNG for the request (:class:`sstq_fl.gen.runner.ClientContext`); the key never leaves the
client and is never logged, so the server's seed says nothing about them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode

from sstq_fl.flower import client_ledger

TRUST_AGGREGATOR = "trust-aggregator"
"""Node config key: ``true`` lets this node's client send sums for a trusted aggregator (default: refused)."""
NOT_TRUSTED = "trusted aggregator not opted in: "  # starts the reason of a refused aggregator release
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


class GenRefusal(ValueError):
    """The client refuses a workload request (no opt-in, budget spent, or an unreadable ledger)."""


def trusts_aggregator(node_config: Mapping[str, Any]) -> bool:
    """The node operator's opt-in :data:`TRUST_AGGREGATOR` (``GenRefusal`` for a value that is not a boolean)."""
    value = node_config.get(TRUST_AGGREGATOR, False)
    text = str(value).strip().lower()
    if text not in _TRUE + _FALSE:
        raise GenRefusal(f"node config {TRUST_AGGREGATOR} must be true or false, got {value!r}")
    return text in _TRUE


def run_task(msg: Message, context: Context, node_defaults: Mapping[str, Any] | None = None) -> Message:
    """Run the message's client task on this node's partition and reply with its arrays once its release is
    charged to the client's ledger; an error reply when the client refuses.  ``node_defaults``: node config
    the app was built with (the nodes a simulation starts), under the node's own."""
    node = {**(node_defaults or {}), **dict(context.node_config)}
    try:
        return _released(msg, context, node)
    except (GenRefusal, client_ledger.ClientBudgetError) as exc:
        return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=f"train.gen: {exc}"), reply_to=msg)


def _released(msg: Message, context: Context, node: Mapping[str, Any]) -> Message:
    from sstq_fl.data.workload import WorkloadData
    from sstq_fl.gen.releases import AGGREGATOR, SECURE
    from sstq_fl.gen.runner import registered_task, run_client_task

    conf: Any = msg.content["request"]
    pid, task, config = int(node["partition-id"]), str(conf["task"]), json.loads(str(conf["config"]))
    release = registered_task(task).release
    if release.kind in (AGGREGATOR, SECURE) and not trusts_aggregator(node):
        what = "sums" if release.kind == AGGREGATOR else "a secure-sum share, unmasked on this path (no SecAgg+),"
        raise GenRefusal(f"{NOT_TRUSTED}task {task} returns {what} only a trusted aggregator may see; the node "
                         f"operator allows it with node config {TRUST_AGGREGATOR}=true")
    found = client_ledger.budgets(0.0, 1e-5, node)
    data = WorkloadData.from_json(str(conf["data"]))
    payload = {k: np.asarray(v.numpy()) for k, v in msg.content.array_records["payload"].items()} \
        if "payload" in msg.content.array_records else {}
    out = run_client_task(data, pid, task, payload, config, int(conf["seed"]), int(conf["round"]))
    event = _event(release, config, out)
    client_ledger.load(context, pid, node).check(event, found)
    client_ledger.charge(context, pid, event, found, 1e-5, node)  # before the reply leaves
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in out.items()})
    return Message(RecordDict({"result": arrays, "meta": ConfigRecord({"partition-id": pid})}), reply_to=msg)


def _event(release: Any, config: dict[str, Any], out: dict[str, np.ndarray]) -> Any:
    """The release's event (``GenRefusal`` naming the problem when it cannot be formed)."""
    try:
        return release.event(config, out)
    except (KeyError, TypeError, ValueError) as exc:
        raise GenRefusal(f"the release's privacy event cannot be formed: {exc}") from None
