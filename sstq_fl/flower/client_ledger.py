"""The client's own privacy ledger: every LDP message this client released, counted by the client.

In the local model the client trusts nobody, the server included (Kasiviswanathan et al., "What
Can We Learn Privately?", FOCS 2008; Duchi, Jordan & Wainwright, "Local Privacy and Statistical
Minimax Rates", FOCS 2013): the server's ledger is the server's account, this one is the client's
guarantee.  Each wire message the client produces is charged as its encoder's privacy event (one
pure ε-LDP release, replace-one over the client's vector) in a
:class:`~sstq_fl.privacy.ledger.PrivacyLedger`, the server's accountant (the exact optimal
composition of pure ε-DP, Kairouz, Oh & Viswanath, ICML 2015, else privacy-loss distributions),
so after ``R`` messages both report the same ε at the same δ.  A message is charged when it is
produced, before it leaves; a refused or failed round charges nothing.

**Budget.**  A client refuses to produce a message that would take its ε at δ past a declared
budget: the mod's (:class:`~sstq_fl.flower.mod.LdpSettings`; the project's app: run-config
``client-budget-epsilon`` at the run's ``delta``) and the node operator's (node config
``client-budget-epsilon`` and ``client-budget-delta``, default 1e-5: set on the SuperNode, out of
the server's reach), each ``0`` for none; every declared budget must hold.  The rule reads only
public numbers (the ε of the messages already sent and the budget), never the data: the refusal
is an ordinary error reply, and the server leaves the client out with that reason.

**Persistence.**  The ledger is one JSON document per client (no pickle) in Flower's
``Context.state`` under :data:`STATE_KEY`, a ConfigRecord keyed ``client:<id>`` (one per virtual
client of a cohort node), which Flower keeps per node and run across rounds.  With the node config
``ledger-dir`` (``flower-supernode --node-config "ledger-dir=/var/lib/sstq"``) the document is also
written atomically to ``<ledger-dir>/client-ledger-<id>.json`` before each message leaves, and on
loading the copy that counts more messages wins: the ledger then outlives a SuperNode restart and
spans runs; a simulation's nodes, which have no node config of their own, read ``$SSTQ_FL_LEDGER_DIR``
instead.  A ledger that cannot be read or written is a refusal too.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context

from ..io import atomic_write_json
from ..privacy.errors import Budget
from ..privacy.events import PrivacyEvent
from ..privacy.ledger import PrivacyLedger

STATE_KEY = "sstq-fl.client-ledger"
FORMAT = "sstq-fl.client-ledger/1"
BUDGET_SPENT = "client budget spent: "  # starts the reason of a client's refusal past its budget
NODE_BUDGET_EPSILON, NODE_BUDGET_DELTA, NODE_LEDGER_DIR = "client-budget-epsilon", "client-budget-delta", "ledger-dir"
LEDGER_DIR_ENV = "SSTQ_FL_LEDGER_DIR"
log = logging.getLogger("sstq_fl.flower")


class ClientBudgetError(ValueError):
    """The client refuses: one more message would exceed a declared budget (or its ledger is unreadable)."""


@dataclass
class ClientLedger:
    """One client's ledger: its messages and their composition (module doc)."""

    client: int
    ledger: PrivacyLedger = field(default_factory=PrivacyLedger)

    @property
    def messages(self) -> int:
        """How many messages the client has produced (each one event)."""
        return sum(e.count for e in self.ledger.entries)

    def to_json(self) -> dict[str, Any]:
        """The document kept in the state (and the file): the events and their counts."""
        return {"format": FORMAT, "client": self.client, "relation": self.ledger.relation, "messages": self.messages,
                "events": [{"event": e.event.to_json(), "count": e.count} for e in self.ledger.entries]}

    @classmethod
    def from_json(cls, doc: Any, client: int) -> ClientLedger:
        """Rebuild a ledger from :meth:`to_json`, strictly (``ClientBudgetError`` naming what is wrong)."""
        try:
            if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("client") != client:
                raise ValueError(f"not the ledger of client {client}")
            led = PrivacyLedger(str(doc["relation"]))
            for item in doc["events"]:
                led.record(PrivacyEvent.from_json(item["event"]), item["count"])
            found = cls(client, led)
            if doc["messages"] != found.messages or isinstance(doc["messages"], bool):
                raise ValueError(f"it counts {doc['messages']!r} messages but holds {found.messages} events")
        except (ValueError, KeyError, TypeError) as exc:
            raise ClientBudgetError(f"the client ledger of client {client} cannot be read: {exc}") from None
        return found

    def epsilon_after(self, event: PrivacyEvent, delta: float) -> float:
        """ε at ``delta`` once one more ``event`` is charged (the ledger itself unchanged)."""
        trial = PrivacyLedger(self.ledger.relation)
        for e in self.ledger.entries:
            trial.record(e.event, e.count)
        trial.record(event)
        return trial.epsilon(delta)

    def check(self, event: PrivacyEvent, budgets: list[Budget]) -> None:
        """``ClientBudgetError`` if one more ``event`` would exceed any of ``budgets`` (public numbers only)."""
        for b in budgets:
            eps = self.epsilon_after(event, b.delta)
            if eps > b.epsilon:
                raise ClientBudgetError(f"{BUDGET_SPENT}client {self.client} has sent {self.messages} messages; one more "
                                        f"would spend epsilon={eps:.6g} at delta={b.delta:g}, over its budget "
                                        f"epsilon={b.epsilon:g}")

    def charge(self, event: PrivacyEvent) -> None:
        """Count one produced message."""
        self.ledger.record(event)

    def report(self, delta: float, budgets: list[Budget] | None = None) -> dict[str, Any]:
        """The client's own report: messages, ε at ``delta`` so far, and its budgets."""
        return {"client": self.client, "messages": self.messages, "delta": delta,
                "epsilon": self.ledger.epsilon(delta) if self.ledger.entries else 0.0,
                "budgets": [{"epsilon": b.epsilon, "delta": b.delta} for b in budgets or []]}


def state_key(client: int) -> str:
    """The key of client ``client``'s document in the state's ConfigRecord."""
    return f"client:{client}"


def ledger_file(node_config: Mapping[str, Any], client: int) -> Path | None:
    """``<ledger-dir>/client-ledger-<client>.json`` when the node config names a ``ledger-dir`` (else
    ``$SSTQ_FL_LEDGER_DIR``: a simulation's nodes have no node config of their own)."""
    where = str(node_config.get(NODE_LEDGER_DIR, "") or os.environ.get(LEDGER_DIR_ENV, ""))
    return Path(where) / f"client-ledger-{client}.json" if where else None


def _state_doc(context: Context, client: int) -> Any:
    """Client ``client``'s document in ``context.state`` (``None`` if none)."""
    rec = context.state.config_records.get(STATE_KEY)
    text = rec.get(state_key(client)) if rec is not None else None
    return json.loads(str(text)) if text is not None else None


def load(context: Context, client: int, node: Mapping[str, Any] | None = None) -> ClientLedger:
    """Client ``client``'s ledger: from the state and the ledger file, the one with more messages
    (the file on a tie); a new one if neither exists.  Unreadable: ``ClientBudgetError``.  ``node``: the
    node config to read the ledger folder from (default ``context.node_config``)."""
    try:
        docs = [_state_doc(context, client)]
        path = ledger_file(context.node_config if node is None else node, client)
        if path is not None and path.exists():
            docs.append(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ClientBudgetError(f"the client ledger of client {client} cannot be read: {exc}") from None
    found = [ClientLedger.from_json(d, client) for d in docs if d is not None]
    return max(reversed(found), key=lambda led: led.messages) if found else ClientLedger(client)


def save(context: Context, led: ClientLedger, node: Mapping[str, Any] | None = None) -> None:
    """Store ``led`` in ``context.state`` and, with a ``ledger-dir`` (in ``node``, default the context's node
    config), its file (atomically)."""
    doc = led.to_json()
    if STATE_KEY not in context.state.config_records:
        context.state[STATE_KEY] = ConfigRecord()
    context.state.config_records[STATE_KEY][state_key(led.client)] = json.dumps(doc, sort_keys=True)
    path = ledger_file(context.node_config if node is None else node, led.client)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, doc)
        except OSError as exc:
            raise ClientBudgetError(f"the client ledger of client {led.client} cannot be written: {exc}") from None


def budgets(epsilon: float, delta: float, node_config: Mapping[str, Any]) -> list[Budget]:
    """Every declared budget: ``(epsilon, delta)`` (the mod's or the run's) and the node operator's
    (node config ``client-budget-epsilon`` / ``client-budget-delta``); ``0`` declares none."""
    out = [Budget(epsilon, delta)] if epsilon else []
    node_eps = _node_number(node_config, NODE_BUDGET_EPSILON, 0.0)
    if node_eps:
        out.append(Budget(node_eps, _node_number(node_config, NODE_BUDGET_DELTA, 1e-5)))
    for b in out:
        if not math.isfinite(b.epsilon):
            raise ClientBudgetError(f"a client budget must be finite (0: none), got epsilon={b.epsilon}")
    return out


def _node_number(node_config: Mapping[str, Any], key: str, default: float) -> float:
    """The node config's number ``key`` (``ClientBudgetError`` naming it if it is not one)."""
    value = node_config.get(key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ClientBudgetError(f"node config {key} must be a number, got {value!r}") from None


def report_delta(found: list[Budget], delta: float) -> float:
    """The δ a client reports its ε at: its first budget's, else ``delta``."""
    return found[0].delta if found else delta


def client_report(context: Context, client: int, delta: float = 1e-5) -> dict[str, Any]:
    """What client ``client`` of this node has spent, for its operator (read from the node's state and
    ledger file): messages, ε at ``delta``, and the node operator's budget."""
    return load(context, client).report(delta, budgets(0.0, delta, context.node_config))


def clients_in_state(context: Context) -> list[int]:
    """The clients whose ledgers this node's state holds (one, or a cohort node's virtual clients)."""
    rec = context.state.config_records.get(STATE_KEY)
    return sorted(int(k.split(":", 1)[1]) for k in (rec or {}).keys() if k.startswith("client:"))


def admit(context: Context, clients: list[int], event: PrivacyEvent, found: list[Budget]
          ) -> tuple[list[int], dict[int, str]]:
    """The ``clients`` that may send one more ``event`` within ``found``; the others with their refusal."""
    ok, refused = [], {}
    for c in clients:
        try:
            load(context, c).check(event, found)
            ok.append(c)
        except ClientBudgetError as exc:
            refused[c] = str(exc)
    return ok, refused


def charge(context: Context, client: int, event: PrivacyEvent, found: list[Budget], delta: float,
           node: Mapping[str, Any] | None = None) -> None:
    """Charge client ``client`` one produced message, store its ledger and log its report at INFO (``node``:
    as in :func:`load`)."""
    led = load(context, client, node)
    led.charge(event)
    save(context, led, node)
    at = report_delta(found, delta)
    limits = ", ".join(f"epsilon={b.epsilon:g} at delta={b.delta:g}" for b in found) or "none"
    log.info("client %d ledger: %d LDP messages, epsilon %.6g at delta %g spent (budget: %s)", client, led.messages,
             led.ledger.epsilon(at), at, limits)
