"""The Flower ``ClientApp``: one simulated client of an sstq-fl run.

On a ``train`` message (round ``t``, the model ``θ`` and the run's config) the client
computes its clipped minibatch gradient on its own partition, encodes it with the configured
encoder and replies with the **wire bytes** (``ConfigRecord`` bytes: no pickle, nothing
executable).  On a ``query`` message it reports its partition id.  All randomness is derived
from ``(seed, round, client)``, so the reply is the same whichever actor runs it.

Under Flower's deployment runtime every message is handled by a fresh ``flwr-clientapp``
process, so there a ``query`` (the server discovering which node holds which partition) is
answered without the heavy imports (torch, the engine), which only ``train`` needs; a
long-lived process (a simulation actor) still makes them while answering the query, as before.

``SSTQ_FL_CLIENT_STATS=0`` keeps the encoder's per-client diagnostics (clipping, Kashin passes:
data-dependent, not covered by the LDP guarantee) out of the reply, so the server learns the
wire message alone; the Docker images set it (docker/commands.json).
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
    return Message(RecordDict({"node": ConfigRecord({"partition-id": _pid(context)})}), reply_to=msg)


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
    ids, blobs, dropped, stats = tr.client_messages(theta, t, np.array([pid]))
    if os.environ.get("SSTQ_FL_CLIENT_STATS", "1") == "0":
        stats = {}
    reply: dict[str, Any] = {"partition-id": pid, "round": t, "stats": json.dumps(stats)}
    if blobs:
        reply["blob"] = blobs[0]
    else:
        reply["dropped"] = dropped[0]["reason"] if dropped else "no message"
    return Message(RecordDict({"reply": ConfigRecord(reply)}), reply_to=msg)
