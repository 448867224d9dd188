"""Fault injection for the server's fault-handling tests: a test ClientApp, never the shipped one.

:func:`fault_injection_mod` raises, sleeps, or replaces a reply's wire message by garbage bytes for the
clients and rounds ``$SSTQ_FL_FAULTS`` names (a JSON list of ``{"client": c, "round": t, "kind": "raise" |
"garbage" | "sleep:S"}``).  :data:`faulty_app` is the project's ClientApp with it outermost
(:func:`sstq_fl.flower.apps.sstq_client.make_client_app`); the shipped ``app`` has no such mod.  On a cohort
node a raise or a sleep hits the node (all its clients), garbage that virtual client's message only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from flwr.app import Context, Message

from sstq_fl.flower.apps.sstq_client import make_client_app
from sstq_fl.flower.cohort import COHORT_ACTION, cohort_of, message_key
from sstq_fl.flower.mod import WIRE_KEY, wire_array

FAULTS_ENV = "SSTQ_FL_FAULTS"


def injected_faults(clients: list[int], t: int) -> dict[int, str]:
    """The faults ``$SSTQ_FL_FAULTS`` names for ``clients`` in round ``t``, by client."""
    return {int(f["client"]): str(f["kind"]) for f in json.loads(os.environ.get(FAULTS_ENV, "[]"))
            if int(f["client"]) in clients and int(f["round"]) == t}


def fault_injection_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """Raise, sleep, or garble the reply, as :func:`injected_faults` says for this message's clients and round."""
    conf: Any = msg.content.config_records.get("config", {})
    cohort = msg.metadata.message_type.endswith(f".{COHORT_ACTION}")
    clients = cohort_of(msg) if cohort else [int(context.node_config["partition-id"])]
    faults = injected_faults(clients, int(conf.get("server-round", -1)))
    if "raise" in faults.values():
        raise RuntimeError(f"injected fault: client {min(c for c, f in faults.items() if f == 'raise')} raises")
    for f in faults.values():
        if f.startswith("sleep:"):
            time.sleep(float(f.split(":", 1)[1]))
    reply = call_next(msg, context)
    for c in [c for c, f in faults.items() if f == "garbage"] if not reply.has_error() else []:
        key = message_key(c) if cohort else WIRE_KEY
        reply.content.array_records["arrays"][key] = wire_array(b"\x00garbage")
    return reply


def _pickled_by_value() -> None:
    """Ray actors rebuild the app from its pickle: this module travels by value (its workers need not import
    ``tests``)."""
    import sys

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


_pickled_by_value()
faulty_app = make_client_app(mods=[fault_injection_mod])
"""The project's ClientApp with :func:`fault_injection_mod` outermost (tests only)."""
