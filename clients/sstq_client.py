"""The project's ``ClientApp``: one simulated client of an sstq-fl run, and of its DP workloads.

Built like any Flower app that adopts an sstq-fl encoder: the ``train`` handler returns its local
model as the ArrayRecord ``arrays`` (one SGD step at unit learning rate on its minibatch,
``θ − g``, with ``num-examples``), and :class:`sstq_fl.flower.LdpEncodeMod` turns the reply into
the ε-LDP wire message of the pseudo-gradient ``θ − (θ − g) = g``, clipped to ``clip``.  The
server takes the step with its learning rate (``FedAvgM``).  The run config is read from
``context.run_config`` (``flwr run``), or from the message where the in-process launcher sends
it (Flower's in-process simulation has no run config).

With ``randomness=secure`` (the deployment default) the client draws fresh keys from its own OS
CSPRNG for its minibatch and, in the mod, for its encoding coins, and never sends them; with
``reproducible`` everything is derived from ``(seed, round, client)``, so the reply is the same
whichever actor runs it (simulation only).  Only the mechanism's output leaves the client: the
wire message and ``num-examples`` (the public batch size).

``train.gen`` messages run a registered client task of a DP generative workload
(:mod:`clients.gen_client`).  ``query`` reports the node's partition
(:func:`sstq_fl.flower.plumbing.answer_query`); a long-lived process (a simulation actor) warms
its heavy imports up meanwhile, a one-shot ``flwr-clientapp`` process does not.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from sstq_fl.flower import LdpEncodeMod, LdpSettings
from sstq_fl.flower.mod import WIRE_KEY, wire_array
from sstq_fl.flower.plumbing import answer_query

from .gen_client import run_task

if TYPE_CHECKING:
    from sstq_fl.fl.engine import ClientData, RunConfig


def run_config(msg: Message, context: Context) -> RunConfig:
    """This message's run config: the one it carries (in-process launcher), else ``context.run_config``."""
    from sstq_fl.fl.engine import RunConfig
    from sstq_fl.flower.run_config import config_from_run_config

    conf: Any = msg.content.config_records.get("config", {})
    if "run-config" in conf:
        return RunConfig(**json.loads(str(conf["run-config"])))
    return config_from_run_config(dict(context.run_config))[0]  # type: ignore[no-any-return]


def ldp_settings(msg: Message, context: Context) -> LdpSettings:
    """The mod's settings from the run config: encoder, ε, radius = ``clip``, frame seed = ``seed``."""
    cfg = run_config(msg, context)
    return LdpSettings(cfg.encoder, cfg.epsilon, cfg.clip, cfg.randomness, frame_seed=cfg.seed, seed=cfg.seed)


@lru_cache(maxsize=2)
def _client_data(cfg_json: str) -> ClientData:
    """The task and the shards (no encoder, no ledger), once per actor process and config."""
    import torch

    from sstq_fl.fl.engine import ClientData, RunConfig

    torch.set_num_threads(1)
    return ClientData(RunConfig(**json.loads(cfg_json)))


def _one_shot_process() -> bool:
    """True in a ``flwr-clientapp`` process (deployment runtime): it handles one message and exits."""
    return Path(sys.argv[0]).name == "flwr-clientapp"


def _injected_fault(pid: int, t: int) -> str | None:
    """``SSTQ_FL_FAULTS``: a JSON list of ``{"client": c, "round": t, "kind": "raise" | "garbage" | "sleep:S"}``."""
    for f in json.loads(os.environ.get("SSTQ_FL_FAULTS", "[]")):
        if int(f["client"]) == pid and int(f["round"]) == t:
            return str(f["kind"])
    return None


def fault_injection_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """A mod for tests of the server's fault handling (outermost): raise, sleep, or replace the wire
    message by garbage bytes, for the client and round ``$SSTQ_FL_FAULTS`` names."""
    conf: Any = msg.content.config_records.get("config", {})
    fault = _injected_fault(int(context.node_config["partition-id"]), int(conf.get("server-round", -1)))
    if fault == "raise":
        raise RuntimeError(f"injected fault: client {context.node_config['partition-id']} raises")
    if fault and fault.startswith("sleep:"):
        time.sleep(float(fault.split(":", 1)[1]))
    reply = call_next(msg, context)
    if fault == "garbage" and not reply.has_error():
        reply.content.array_records["arrays"] = ArrayRecord({WIRE_KEY: wire_array(b"\x00garbage")})
    return reply


app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    if not _one_shot_process():  # warm a long-lived process up for its train messages
        import torch  # noqa: F401

        import sstq_fl.fl.engine  # noqa: F401
    return answer_query(msg, context)


@app.train(mods=[fault_injection_mod, LdpEncodeMod(settings=ldp_settings, metrics="num-examples")])
def train(msg: Message, context: Context) -> Message:
    """One SGD step at unit learning rate: reply ``θ − g`` (float64, so that ``θ − (θ − g) = g`` exactly)."""
    import torch

    from sstq_fl.fl.partition import client_coins

    cfg = run_config(msg, context)
    data = _client_data(json.dumps(asdict(cfg), sort_keys=True))
    content: Any = msg.content
    t, pid = int(content["config"]["server-round"]), int(context.node_config["partition-id"])
    theta = torch.from_numpy(np.array(content["arrays"]["theta"].numpy()))
    g, _ = data.gradients(theta, t, np.array([pid]), client_coins(cfg.randomness, cfg.seed, t, np.array([pid])))
    local = theta.double().numpy() - g[0].double().numpy()
    return Message(RecordDict({"arrays": ArrayRecord({"theta": Array(local)}),
                               "metrics": MetricRecord({"num-examples": cfg.batch})}), reply_to=msg)


@app.train("gen")
def gen(msg: Message, context: Context) -> Message:
    """A DP generative workload's client task (``train.gen``)."""
    return run_task(msg, context)
