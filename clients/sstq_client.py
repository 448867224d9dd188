"""The Flower ``ClientApp``: one simulated client of an sstq-fl run.

On a ``train`` message (round ``t``, the model ``θ`` and the run's config) the client
computes its clipped minibatch gradient on its own partition, encodes it with the configured
encoder and replies with the **wire bytes** (``ConfigRecord`` bytes: no pickle, nothing
executable).  On a ``query`` message it reports its partition id and the federation's size
(``num-partitions`` from its node config, when set).  With ``randomness=secure``
(the deployment default) the client draws a fresh key from its own OS CSPRNG for its minibatch
and its encoding coins, and never sends it; with ``reproducible`` everything is derived from
``(seed, round, client)``, so the reply is the same whichever actor runs it (simulation only).

Under Flower's deployment runtime every message is handled by a fresh ``flwr-clientapp``
process, so there a ``query`` (the server discovering which node holds which partition) is
answered without the heavy imports (torch, the engine), which only ``train`` needs; a
long-lived process (a simulation actor) still makes them while answering the query, as before.

Only the mechanism's output leaves the client: the reply holds the partition id, the round and
the wire bytes.  The encoder's data-dependent diagnostics (clipping, Kashin passes) are added
only when the run config opts in with ``diagnostics`` (allowed in reproducible mode only), and a
non-finite gradient is encoded as the public null input instead of being declined.
"""

from __future__ import annotations

import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

if TYPE_CHECKING:
    from sstq_fl.fl.engine import Trainer

app = ClientApp()


@lru_cache(maxsize=2)
def _trainer(cfg_json: str) -> Trainer:
    """One trainer (data, partitions, encoder) per actor process and config."""
    import torch

    from sstq_fl.fl.engine import RunConfig, Trainer

    torch.set_num_threads(1)
    return Trainer(RunConfig(**json.loads(cfg_json)))


def _pid(context: Context) -> int:
    return int(context.node_config["partition-id"])


def _one_shot_process() -> bool:
    """True in a ``flwr-clientapp`` process (deployment runtime): it handles one message and exits."""
    return Path(sys.argv[0]).name == "flwr-clientapp"


@app.query()
def query(msg: Message, context: Context) -> Message:
    if not _one_shot_process():  # warm a long-lived process up for its train messages
        import torch  # noqa: F401

        import sstq_fl.fl.engine  # noqa: F401
    answer: dict[str, Any] = {"partition-id": _pid(context)}
    if "num-partitions" in context.node_config:  # the federation's size, checked against the run's clients
        answer["num-partitions"] = int(context.node_config["num-partitions"])
    return Message(RecordDict({"node": ConfigRecord(answer)}), reply_to=msg)


def _injected_fault(pid: int, t: int) -> str | None:
    """Fault injection for tests of the server's fault handling: ``SSTQ_FL_FAULTS`` holds a
    JSON list of ``{"client": c, "round": t, "kind": "raise" | "garbage" | "sleep:SECONDS"}``."""
    for f in json.loads(os.environ.get("SSTQ_FL_FAULTS", "[]")):
        if int(f["client"]) == pid and int(f["round"]) == t:
            return str(f["kind"])
    return None


@app.train()
def train(msg: Message, context: Context) -> Message:
    conf: Any = msg.content["config"]
    tr = _trainer(str(conf["run-config"]))
    t, pid = int(conf["round"]), _pid(context)
    fault = _injected_fault(pid, t)
    if fault == "raise":
        raise RuntimeError(f"injected fault: client {pid} raises in round {t}")
    if fault and fault.startswith("sleep:"):
        import time

        time.sleep(float(fault.split(":", 1)[1]))
    if fault == "garbage":
        return Message(RecordDict({"reply": ConfigRecord({"partition-id": pid, "round": t, "blob": b"\x00garbage"})}),
                       reply_to=msg)
    import numpy as np
    import torch

    model: Any = msg.content["model"]
    theta = torch.from_numpy(np.array(model["theta"].numpy()))
    blobs, stats = tr.client_messages(theta, t, np.array([pid]))
    reply: dict[str, Any] = {"partition-id": pid, "round": t, "blob": blobs[0]}
    if tr.cfg.diagnostics:
        reply["stats"] = json.dumps(stats)
    return Message(RecordDict({"reply": ConfigRecord(reply)}), reply_to=msg)
