"""``LdpDecoding``: a Flower strategy wrapper that decodes LDP wire messages for any strategy.

```python
strategy = LdpDecoding(FedAvg(fraction_train=0.5, fraction_evaluate=0.0), encoder="privunit", epsilon=3.0, radius=0.01)
strategy.start(grid, initial_arrays, num_rounds=20, evaluate_fn=...)
```

with :class:`sstq_fl.flower.LdpEncodeMod` (same encoder, ε, radius and frame seed) in the
ClientApp.  Overriding only what differs, in the manner of Flower's DP wrappers:

* ``configure_train``: the inner strategy configures the round (sampling, its own config keys);
  the wrapper adds the encoder's fingerprint, so a client encoding otherwise refuses.
* ``aggregate_train``: each reply's wire message is validated (an error reply, a reply without
  a message, a second reply from one node, a node this round did not ask, a malformed, foreign
  or stale message: left out, its reason logged and kept in :attr:`last`); the valid ones are
  averaged in the encoder's accumulation space (:func:`sstq_fl.aggregation.decode_mean`, uniform
  weights: one ε-LDP message, one vote; weighting by a client-reported ``num-examples`` would let
  an unprotected number steer the aggregate), the mean's norm is capped at ``server_cap`` (public
  post-processing), and the inner strategy receives **one** reply holding
  ``θ_global − mean(Δ̂)`` as a normal ArrayRecord, with the clients' metrics averaged.  FedAvg
  returns it as is; FedAvgM, FedAdam, FedYogi, FedAdagrad take their server step from it;
  FedProx's proximal term is the clients'.  Robust aggregators (Krum, median) see one aggregate:
  individual LDP estimates are too noisy to rank.
* The privacy ledger (:attr:`ledger`, :class:`sstq_fl.privacy.ledger.PrivacyLedger`) is charged one
  ``enc.privacy_event()`` per message of the busiest client (:func:`sstq_fl.aggregation.charge_joins`)
  in ``configure_train``, for every client the round's messages ask, before they leave (then
  ``on_charge`` is called, e.g. to write the transcript): a client whose reply is lost stays charged;
  ``epsilon-spent`` is added to the round's train metrics.
* A round in which clients were asked and no valid message arrived raises :class:`EmptyRound`,
  whose message is the one-line cause (an encoder mismatch naming both configurations in full,
  "no LDP message in any reply of round N: is LdpEncodeMod in the ClientApp's mods?", every
  client timed out, or the first client's reason); ``allow_empty_rounds=True`` keeps the model
  and goes on instead.  A client past its own budget (:mod:`sstq_fl.flower.client_ledger`) refuses
  with an error reply: left out like any other, with its reason.  The wrapper logs "uniform mean
  of N LDP messages" per round, and its summary says that it weighs every message equally, whatever weighting
  the inner strategy's own summary names (Flower's FedAvg names its ``weighted_by_key``, which the wrapper
  never uses).  Flower's own lines are left as Flower logs them: the inner strategy's count of replies in a
  round is the one aggregate reply the wrapper hands it.

Client evaluation is the inner strategy's, unprotected: a ``fraction_evaluate > 0`` sends the
model to clients whose evaluation metrics (loss, accuracy, ``num-examples`` on their data)
come back in the clear.  ``fraction_evaluate=0.0`` with a central ``evaluate_fn`` keeps the LDP
messages the only thing that leaves a client.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.app.exception import AppExitException
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy
from flwr.supercore.exit import ExitCode

from ..aggregation import charge_joins, decode_mean
from ..encoders import Encoder
from ..privacy.errors import Budget
from ..privacy.ledger import PrivacyLedger
from ..progress import configure_logging
from .client_ledger import BUDGET_SPENT
from .logs import summary_level
from .mod import (
    KEY_ENCODER,
    KEY_FINGERPRINT,
    MISMATCH,
    WIRE_KEY,
    WIRE_STYPE,
    LdpSettings,
    encoder_for,
    flatten,
    public_spec,
    unflatten,
)
from .replies import error_reason, node_unavailable, sender

log = logging.getLogger("sstq_fl.flower")
UNIFORM = "weighted uniformly (one LDP message, one vote; the inner strategy's weighting below is not used)"
"""How the wrapper's summary says it averages."""
NO_MESSAGE = "(is LdpEncodeMod in the ClientApp?)"  # ends the reason of a reply that holds no LDP message
TIMEOUT = "no reply before the round timeout"


class EmptyRound(AppExitException, ValueError):
    """A training round in which no valid LDP message arrived (the message is the one-line cause).

    Flower's deployment runtime exits the ServerApp with code 200 (strategy precondition unmet),
    its simulation runtime with 700; ``sstq-fl`` prints it as its one-line error."""

    exit_code = ExitCode.SERVERAPP_STRATEGY_PRECONDITION_UNMET


def wire_blob(r: Message) -> tuple[str, bytes]:
    """A reply's ArrayRecord key and wire message (``ValueError`` naming what is wrong)."""
    recs = r.content.array_records
    if len(recs) != 1:
        raise ValueError(f"reply holds {len(recs)} ArrayRecords, not one LDP message {NO_MESSAGE}")
    key, rec = next(iter(recs.items()))
    arr = rec.get(WIRE_KEY) if list(rec.keys()) == [WIRE_KEY] else None
    if arr is None or arr.stype != WIRE_STYPE or not isinstance(arr.data, bytes):
        raise ValueError(f"reply without an LDP message {NO_MESSAGE}")
    return str(key), arr.data


def empty_round_cause(t: int, dropped: list[dict[str, Any]], enc: Encoder) -> str:
    """Why round ``t`` has no valid message, in one line: an encoder mismatch (named in full on both
    sides), no LDP message in any reply (the mod missing), else the first client's reason."""
    reasons = [str(d["reason"]) for d in dropped]
    refused = [r.split(MISMATCH, 1)[1] for r in reasons if MISMATCH in r]
    if refused:
        return f"encoder mismatch in round {t}: {refused[0]} ({len(refused)} of {len(reasons)} clients refused)"
    foreign = [r for r in reasons if "foreign message" in r]
    if foreign:
        return f"encoder mismatch in round {t}: {foreign[0]}; the server decodes {public_spec(enc)}"
    answered = [r for r in reasons if r != TIMEOUT]
    spent = [r.split(BUDGET_SPENT, 1)[1] for r in answered if BUDGET_SPENT in r]
    if spent and len(spent) == len(answered):
        return f"no LDP message in round {t}: every answering client's budget is spent ({len(spent)} refused; {spent[0]})"
    if answered and all(NO_MESSAGE in r for r in answered):
        return f"no LDP message in any reply of round {t}: is LdpEncodeMod in the ClientApp's mods?"
    if not answered:
        return f"no reply in round {t}: every asked client ({len(reasons)}) timed out"
    first = next(d for d in dropped if d["reason"] != TIMEOUT)
    return f"no valid LDP message in round {t}: {len(reasons)} clients left out, client {first['client']}: {first['reason']}"


def new_ledger(enc: Encoder, num_rounds: int | None, budget_epsilon: float | None, delta: float) -> PrivacyLedger:
    """A server ledger for ``enc``'s messages, planned for ``num_rounds`` per client (refused over
    ``budget_epsilon``); ``None``: a round loop of unknown length, recorded without a plan."""
    ledger = PrivacyLedger("replace_one", notes={"encoder": enc.spec, "run_id": uuid.uuid4().hex[:12],
                                                 "threat_model": "identified: the server sees each "
                                                 "client's messages; epsilon is the busiest client's"})
    budget = Budget(budget_epsilon, delta) if budget_epsilon else None
    if num_rounds is not None:
        ledger.start([(enc.privacy_event(), num_rounds)], budget)
    return ledger


class WrongApi(AppExitException, TypeError):
    """A strategy of the other Flower API handed to a wrapper, or a wrapper run by the other API's
    workflow (the message names the wrapper to use); exits like :class:`EmptyRound`."""

    exit_code = ExitCode.SERVERAPP_STRATEGY_PRECONDITION_UNMET


MESSAGE_API = ("LdpDecoding wraps a Message-API strategy (flwr.serverapp.strategy, run by strategy.start(grid, ...)); "
               "for a legacy flwr.server.strategy strategy (LegacyContext, DefaultWorkflow, ServerApp(server_fn=...)) "
               "use sstq_fl.flower.LegacyLdpDecoding")


def check_message_api(strategy: object) -> None:
    """Refuse anything but a Message-API strategy, naming the legacy wrapper for a legacy one."""
    if not isinstance(strategy, Strategy):
        raise WrongApi(f"{MESSAGE_API}: got {type(strategy).__module__}.{type(strategy).__name__}")


class LdpDecoding(Strategy):
    """Wrap ``strategy``: decode the clients' LDP messages, hand it their average (module doc).

    ``identify`` maps a node id to the client the ledger charges (default: the node itself).
    ``ledger``: an already planned ledger to charge (default: a new one, planned in :meth:`start`
    for ``num_rounds`` messages per client, refusing a plan over ``budget_epsilon``).
    ``allow_empty_rounds``: a round without a valid message leaves the model as it is instead of
    raising :class:`EmptyRound`.  ``on_charge``: called once a round's charge is in the ledger, before
    its messages are returned to be sent (e.g. to write the transcript)."""

    def __init__(self, strategy: Strategy, encoder: str, epsilon: float, radius: float, *, frame_seed: int = 0,
                 server_cap: float | None = None, delta: float = 1e-5, budget_epsilon: float | None = None,
                 ledger: PrivacyLedger | None = None, identify: Callable[[int], int] | None = None,
                 allow_empty_rounds: bool = False, on_charge: Callable[[], None] | None = None):
        super().__init__()
        check_message_api(strategy)
        self.on_charge = on_charge
        self.allow_empty_rounds = allow_empty_rounds
        self.strategy, self.settings = strategy, LdpSettings(encoder, float(epsilon), float(radius), frame_seed=frame_seed)
        self.server_cap, self.delta, self.budget_epsilon = server_cap, delta, budget_epsilon
        self.ledger, self.identify = ledger, identify or (lambda node: node)
        self.enc: Encoder | None = None
        self.joins: dict[int, int] = {}  # messages per client, the ledger's basis
        self.last: dict[str, Any] = {}  # the last round: round, clients, dropped [{client, reason}], bits, bytes
        self._sent: list[Message] = []
        self._round, self._global = 0, ArrayRecord()
        self._silent: set[int] = set()

    def initialize_parameters(self, *args: Any, **kwargs: Any) -> None:
        """Where a legacy workflow (``DefaultWorkflow``) starts a strategy: the one-line refusal."""
        raise WrongApi(f"{MESSAGE_API}, or run this one with strategy.start(grid, initial_arrays, ...)")

    def summary(self) -> None:
        s = self.settings
        log.log(summary_level(), "LdpDecoding: encoder %s, epsilon %s per message, radius %s, server cap %s; %s",
                s.encoder, s.epsilon, s.radius, self.server_cap, UNIFORM)
        self.strategy.summary()

    def prepare(self, arrays: ArrayRecord, num_rounds: int | None) -> Encoder:
        """Build the encoder for ``arrays``' dimension and a new ledger, planned for ``num_rounds``
        messages per client (refused over ``budget_epsilon``); ``None``: a round loop of the caller's
        own, of unknown length, so the ledger records without a plan."""
        s = self.settings
        self.enc = encoder_for(s.encoder, int(flatten(arrays).size), s.epsilon, s.radius, s.frame_seed)
        if self.ledger is None:
            self.ledger = new_ledger(self.enc, num_rounds, self.budget_epsilon, self.delta)
        return self.enc

    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None) -> Result:
        """Flower's ``Strategy.start``, after :meth:`prepare` (the ledger's plan is ``num_rounds``).

        The ``sstq_fl`` loggers get their handler here (:func:`sstq_fl.progress.configure_logging`;
        idempotent, Flower's and the root logger untouched), so the summary and the reasons a
        client was left out appear in any ServerApp's log."""
        configure_logging()
        self.prepare(initial_arrays, num_rounds)
        return super().start(grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        base = self.enc or self.prepare(arrays, None)
        self._global = arrays
        self._sent = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self._round = int(config.get("server-round", server_round))  # type: ignore[arg-type]
        enc = base.for_round(self._round)  # the round's public frame: its fingerprint names the round
        for m in self._sent:
            for conf in m.content.config_records.values():
                conf[KEY_FINGERPRINT], conf[KEY_ENCODER] = enc.fingerprint, public_spec(enc)
        self.charge_sent()
        return self._sent

    def sent_clients(self) -> list[int]:
        """The clients this round's messages ask, one message each (as ``identify`` names their nodes)."""
        return [self.identify(int(m.metadata.dst_node_id)) for m in self._sent]

    def charge_sent(self) -> None:
        """Charge the ledger for this round's messages (each asked client's, valid reply or not: the busiest
        client's new ones) and call ``on_charge``, before the messages leave."""
        assert self.enc is not None and self.ledger is not None
        for c in self.sent_clients():
            self.joins[c] = self.joins.get(c, 0) + 1
        charge_joins(self.ledger, self.enc, list(self.joins.values()), self._round)
        if self.on_charge is not None:
            self.on_charge()

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        assert self.enc is not None and self.ledger is not None
        replies = list(replies)
        clients, blobs, kept, dropped = self._collect(replies)
        order = sorted(range(len(clients)), key=lambda i: clients[i])  # a deterministic sum: client order
        clients, blobs, kept = [clients[i] for i in order], [blobs[i] for i in order], [kept[i] for i in order]
        got = decode_mean(self.enc.for_round(self._round), blobs, self._round, self.server_cap, _dtype(self._global))
        dropped += [{"client": clients[i], "reason": why} for i, why in got.rejected]
        ok = set(range(len(clients))) - {i for i, _ in got.rejected}
        self.last = {"round": self._round, "clients": self.asked_clients(), "dropped": dropped,
                     "senders": [clients[i] for i in sorted(ok)],
                     "silent": sorted(self.identify(n) for n in self._silent),
                     "bits_per_client": self.enc.payload_bits() if blobs else 0, "bytes_per_client": got.bytes_per_message}
        for d in dropped:
            log.warning("round %d: client %s left out: %s", self._round, d["client"], d["reason"])
        log.log(summary_level(), "aggregate_train: uniform mean of %d LDP messages (%d left out)", len(ok), len(dropped))
        if got.mean is None:
            if dropped and not self.allow_empty_rounds:
                raise EmptyRound(empty_round_cause(self._round, dropped, self.enc))
            return None, None
        return self._inner(server_round, got.mean, [kept[i] for i in sorted(ok)])

    def asked_clients(self) -> int:
        """How many clients this round's messages asked for (one per message)."""
        return len(self._sent)

    def _collect(self, replies: list[Message]) -> tuple[list[int], list[bytes], list[Message], list[dict[str, Any]]]:
        """The replies' clients (as ``identify`` names them) and wire messages; the others, with why they
        are left out."""
        nodes, blobs, kept, dropped = self._read(replies)
        return [self.identify(n) for n in nodes], blobs, kept, dropped

    def _read(self, replies: list[Message]) -> tuple[list[int], list[bytes], list[Message], list[dict[str, Any]]]:
        """The replies' senders (node ids) and wire messages; the others, with why they are left out."""
        asked = {int(m.metadata.dst_node_id) for m in self._sent}
        nodes, blobs, kept, dropped, replied = [], [], [], [], set()
        self._silent = set()
        for r in replies:
            node = sender(r, self._sent)
            replied.add(node)
            if node_unavailable(r):
                self._silent.add(node)
            why = error_reason(r) if r.has_error() else None
            if why is None and node not in asked:
                why = f"reply from node {node}, which this round did not ask"
            elif why is None and node in nodes:
                why = "second reply from the same client in one round (replay) ignored"
            if why is None:
                try:
                    blobs.append(wire_blob(r)[1])
                    nodes.append(node)
                    kept.append(r)
                    continue
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    why = f"malformed reply: {str(exc)[:2000]}"
            dropped.append({"client": self.identify(node) if node >= 0 else node, "reason": why})
        late = sorted(asked - replied, key=self.identify)
        self._silent |= set(late)
        dropped += [{"client": self.identify(n), "reason": TIMEOUT} for n in late]
        return nodes, blobs, kept, dropped

    def _inner(self, server_round: int, mean: torch.Tensor, kept: list[Message]
               ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Hand the inner strategy one reply: ``θ_global − mean`` and the clients' averaged metrics."""
        assert self.ledger is not None
        theta = flatten(self._global) - mean.double().numpy()
        key = str(getattr(self.strategy, "weighted_by_key", "num-examples"))
        arrays_key = next(iter(kept[0].content.array_records))  # the ArrayRecord's key in the clients' replies
        averaged = MetricRecord(uniform_metrics([_one_metrics(r) for r in kept], key))
        content = RecordDict({arrays_key: unflatten(theta, self._global), "metrics": averaged})
        arrays, metrics = self.strategy.aggregate_train(server_round, [Message(content, dst_node_id=0,
                                                                               message_type=MessageType.TRAIN)])
        metrics = MetricRecord() if metrics is None else metrics
        metrics["epsilon-spent"] = float(self.ledger.epsilon(self.delta))
        return arrays, metrics

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)


def _dtype(arrays: ArrayRecord) -> torch.dtype:
    """float32 when every array is float32 (the decoded mean in the model's precision), else float64."""
    return torch.float32 if all(a.dtype == "float32" for a in arrays.values()) else torch.float64


def _one_metrics(r: Message) -> Mapping[str, Any]:
    """A reply's metrics: its one MetricRecord (none when it holds several)."""
    return next(iter(r.content.metric_records.values())) if len(r.content.metric_records) == 1 else {}


def uniform_metrics(records: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    """The kept replies' metrics for the inner strategy: each key every reply reports as a finite
    number, averaged uniformly (one message, one vote), and ``key`` = the number of messages.

    A client-reported number never weights the aggregate or the metrics: NaN, infinite, negative
    or list-valued entries are left out instead of reaching Flower's
    weighted averages."""
    values: dict[str, list[float]] = {}
    for rec in records:
        for k, v in rec.items():
            if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v):
                values.setdefault(str(k), []).append(float(v))
    out = {k: float(np.mean(v)) for k, v in values.items() if len(v) == len(records) and k != key}
    return {**out, key: len(records)}
