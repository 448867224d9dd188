"""``LdpEncodeMod``: a Flower client mod that sends an LDP encoding of the client's update.

Put it in any ClientApp whose ``train`` handler returns the locally trained model as one
``ArrayRecord`` with the keys of the one it received (the shape of Flower's quickstarts):

```python
app = ClientApp(mods=[arrays_size_mod, LdpEncodeMod("privunit", epsilon=3.0, radius=0.01)])
```

and wrap the server's strategy in :class:`sstq_fl.flower.LdpDecoding` with the same encoder.

Where it goes among Flower's mods: ``ClientApp(mods=[a, b])`` runs ``a(msg, ctx, b(msg, ctx, handler))``
(the app's mods first, then a handler's own ``@app.train(mods=...)``), so ``a`` sees the incoming
message first and the outgoing reply **last**.  A mod listed before ``LdpEncodeMod`` sees what
leaves the client (the wire message); one listed after it, or in ``@app.train(mods=...)``, sees
the local model.  Size mods (``arrays_size_mod``, ``message_size_mod``) therefore go before it;
placed after it they report the model's size as sent, and the mod warns once.  A mod sees only the
next layer (``call_next``), so it tells a size mod inside it by that mod's lines on Flower's ``flwr``
logger while its ``call_next`` runs (:class:`SizeModLines`, a ``logging.Filter`` that lets every record
pass): where Flower's INFO logs are hidden, the size lines are too, and there is nothing to warn about.

An unwrapped server (its train message carries no fingerprint of :class:`LdpDecoding`) gets
``num-examples = 1`` (a constant: one message) in the reply's metrics, so Flower's FedAvg family
passes its reply validation and stops at the wire message, whose ``stype`` (:data:`WIRE_STYPE`)
names ``LdpDecoding``.

What it encodes: the **pseudo-gradient** ``Δ = θ_global − θ_local`` (the model delta with the
sign of a gradient, as in FedOpt: Reddi et al., "Adaptive Federated Optimization", ICLR 2021),
flattened in the ArrayRecord's key order, projected onto the L2 ball of radius ``R`` and
encoded by an ε-LDP encoder (pure ε-LDP with respect to any two inputs in the ball: the
encoder's own guarantee, e.g. SSTQ, vqSGD, SQKR, PrivUnit: Bhowmick et al., "Protection Against
Reconstruction and Its Applications in Private Federated Learning", 2018).  ``R`` is also the
server's step: the decoded mean's noise grows with ``R`` (its norm is tens to hundreds of times
``R`` for a few clients and 10⁴–10⁵ parameters), so ``R`` near the updates' own norm or below it,
not 1.0, keeps a model the size of Flower's quickstart CNN from diverging.  A non-finite ``Δ`` is replaced by
the public null input ``0``, so the message looks like any other.  The reply's arrays are
replaced by the wire message alone (:data:`WIRE_STYPE`, raw bytes: nothing executable, no
pickle), and its metrics are dropped by default (``metrics="none"``): only the mechanism's output
leaves the client.  ``"num-examples"`` keeps that one count, ``"keep"`` every metric, for metrics
the app knows to be public: the LDP guarantee covers the arrays only, never metrics the app
computes on its data (a train loss is a function of the private records).  The server wrapper
weights every message equally, so it needs no metric.

Coins: ``randomness="secure"`` (default) draws a fresh 256-bit key per message from this
process's OS CSPRNG (:func:`sstq_fl.rng.fresh_keys`); it never leaves the client.
``"reproducible"`` derives them from ``(seed, server-round, partition id)``: simulation research
only, no guarantee against whoever holds the seed.

The client's own ledger (:mod:`sstq_fl.flower.client_ledger`): each produced message is charged
in ``context.state`` before it leaves, with the server's accountant; past a declared budget
(``budget_epsilon``, or the node config's ``client-budget-epsilon``) the mod refuses before the
handler runs, an error reply like the mismatch refusal; :meth:`LdpEncodeMod.report` reads it.
Each charge logs one INFO line, shown in Flower's log stream (:mod:`sstq_fl.flower.logs`) unless the mod is
built with ``flower_log=False``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Error, Message, MessageType, MetricRecord
from flwr.common.constant import ErrorCode
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

from .. import wire
from ..config.train import RunConfig
from ..encoders import Encoder, make_encoder
from ..fl.round_draws import encoder_seeds
from ..rng import check_mode, fresh_keys
from . import client_ledger
from . import legacy_format as legacy
from .logs import show_in_flower_log

# an Array holding one wire message (sstq_fl.wire), not a numpy array; the name is what Flower's
# Array.numpy() error shows when a strategy without the wrapper reaches it
WIRE_STYPE = "sstq-fl.wire/1: an LDP message; wrap the server's strategy in sstq_fl.flower.LdpDecoding"
WIRE_KEY = "ldp-message"
KEY_FINGERPRINT = "ldp-fingerprint"  # sent by LdpDecoding: the encoder configuration it decodes
KEY_ENCODER = "ldp-encoder"
METRICS = ("keep", "num-examples", "none")
MISMATCH = "encoder mismatch: "  # starts the mod's refusal of a server decoding another configuration
SIZE_LINES = {"Incoming message size": "message_size_mod", "Outgoing message size": "message_size_mod",
              "Incoming `ArrayRecord` size": "arrays_size_mod", "Outgoing `ArrayRecord` size": "arrays_size_mod",
              "Total array elements": "arrays_size_mod"}
"""The start of each line Flower's size mods log (flwr.clientapp.mod.comms_mods), and the mod that logs it."""
log = logging.getLogger("sstq_fl.flower")


class LdpModError(ValueError):
    """A train message or reply the mod cannot encode (returned to the server as an error reply)."""


@dataclass(frozen=True)
class LdpSettings:
    """One client's encoding settings: encoder spec, per-message ε, clipping radius ``R``, coins, and the
    client's budget ``(budget_epsilon, budget_delta)`` over all its messages (``0``: none;
    :mod:`sstq_fl.flower.client_ledger`)."""

    encoder: str
    epsilon: float
    radius: float
    randomness: str = "secure"
    frame_seed: int = 0
    seed: int = 0
    budget_epsilon: float = 0.0
    budget_delta: float = 1e-5

    @classmethod
    def from_config(cls, cfg: RunConfig) -> LdpSettings:
        """A training run's settings (:class:`~sstq_fl.config.train.RunConfig`): its encoder, per-message ε,
        ``clip`` as the radius, its randomness, ``seed`` as the frame and coin seed, and the client budget
        ``client_budget_epsilon`` at ``delta``."""
        return cls(cfg.encoder, cfg.epsilon, cfg.clip, cfg.randomness, frame_seed=cfg.seed, seed=cfg.seed,
                   budget_epsilon=cfg.client_budget_epsilon, budget_delta=cfg.delta)

    def __post_init__(self) -> None:
        check_mode(self.randomness)
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"LDP epsilon must be positive and finite, got {self.epsilon!r}")
        if not (self.radius > 0 and math.isfinite(self.radius)):
            raise ValueError(f"LDP radius must be positive and finite, got {self.radius!r}")
        if not (self.budget_epsilon >= 0 and math.isfinite(self.budget_epsilon)):
            raise ValueError(f"client budget epsilon must be non-negative and finite (0: none), got {self.budget_epsilon!r}")
        if not 0 <= self.budget_delta < 1:
            raise ValueError(f"client budget delta must be in [0, 1), got {self.budget_delta!r}")


@lru_cache(maxsize=8)
def encoder_for(spec: str, dim: int, epsilon: float, radius: float, frame_seed: int) -> Encoder:
    """The encoder of a configuration (cached: building a frame costs more than one message)."""
    return make_encoder(spec, dim, epsilon, radius=radius, seed=frame_seed)


def flatten(rec: ArrayRecord) -> np.ndarray:
    """The record's arrays raveled and concatenated in key order, as float64."""
    parts = [np.asarray(a.numpy(), dtype=np.float64).ravel() for a in rec.values()]
    return np.concatenate(parts) if parts else np.zeros(0)


def unflatten(vec: np.ndarray, like: ArrayRecord) -> ArrayRecord:
    """Inverse of :func:`flatten`: ``vec`` cut into ``like``'s keys, shapes and dtypes."""
    out, at = {}, 0
    for k, a in like.items():
        ref = a.numpy()
        out[k] = Array(np.ascontiguousarray(vec[at:at + ref.size].reshape(ref.shape).astype(ref.dtype)))
        at += ref.size
    return ArrayRecord(out)


def wire_array(blob: bytes) -> Array:
    """One wire message as a Flower ``Array`` (raw bytes, ``stype`` :data:`WIRE_STYPE`)."""
    return Array(dtype="uint8", shape=(len(blob),), stype=WIRE_STYPE, data=bytes(blob))


def single(records: Mapping[str, ArrayRecord], what: str) -> tuple[str, ArrayRecord]:
    """The one ArrayRecord of a message (``LdpModError`` naming ``what`` otherwise)."""
    if len(records) != 1:
        raise LdpModError(f"{what} must hold exactly one ArrayRecord, found {len(records)}")
    key, rec = next(iter(records.items()))
    return str(key), rec


def server_round(msg: Message) -> int:
    """The ``server-round`` of a train message's ConfigRecord (Flower's convention)."""
    for conf in msg.content.config_records.values():
        if "server-round" in conf:
            return int(conf["server-round"])  # type: ignore[arg-type]
    raise LdpModError("the train message has no 'server-round' in its ConfigRecord")


class LdpEncodeMod:
    """A Flower client mod: the train reply's arrays become one ε-LDP wire message (module doc).

    ``budget_epsilon`` / ``budget_delta``: the client's budget over all its messages (``0``: none);
    past it the client refuses to encode (an error reply).  Its ledger lives in ``context.state``
    (:mod:`sstq_fl.flower.client_ledger`; :meth:`report` reads it).
    ``settings``: instead of fixed arguments, a function of the message and the context (e.g.
    reading ``context.run_config``) returning :class:`LdpSettings` per message; ``flower_log``: the ledger's
    INFO lines go to Flower's log stream (:func:`sstq_fl.flower.logs.show_in_flower_log`)."""

    def __init__(self, encoder: str | None = None, epsilon: float | None = None, radius: float | None = None, *,
                 randomness: str = "secure", frame_seed: int = 0, seed: int = 0, metrics: str = "none",
                 budget_epsilon: float = 0.0, budget_delta: float = 1e-5,
                 settings: Callable[[Message, Context], LdpSettings] | None = None, flower_log: bool = True):
        if metrics not in METRICS:
            raise ValueError(f"metrics must be one of {METRICS}, got {metrics!r}")
        if settings is None:
            if encoder is None or epsilon is None or radius is None:
                raise ValueError("LdpEncodeMod needs encoder, epsilon and radius (or a settings function)")
            fixed = LdpSettings(encoder, float(epsilon), float(radius), randomness, frame_seed, seed,
                                float(budget_epsilon), float(budget_delta))
            settings = lambda msg, context: fixed  # noqa: E731
        self.settings, self.metrics, self.flower_log = settings, metrics, flower_log
        self.warned = False

    def __call__(self, msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        if msg.metadata.message_type.split(".")[0] != MessageType.TRAIN:  # train and train.<action>
            return call_next(msg, context)
        if self.flower_log:
            show_in_flower_log()  # the ledger's INFO line, in the ClientApp's log stream
        check_pairing(msg)  # raised, not an error reply: secaggplus_mod would hide the reply's reason
        try:
            if legacy.is_fit(msg) and not wrapped_server(msg):
                return legacy.refusal(msg)
            s = self.settings(msg, context)
            _, sent = single(msg.content.array_records, "the server's train message")
            enc = encoder_for(s.encoder, int(flatten(sent).size), s.epsilon, s.radius, s.frame_seed)
            enc = enc.for_round(server_round(msg))  # the round's public frame: its fingerprint names the round
            check_server(msg, enc)
            found = client_ledger.budgets(s.budget_epsilon, s.budget_delta, context.node_config)
            client_ledger.load(context, partition(context)).check(enc.privacy_event(), found)  # before any work
            reply = self._next(call_next, msg, context)
            if reply.has_error():
                return reply
            self._encode_reply(msg, reply, sent, s, context, enc)
            return reply
        except (LdpModError, ValueError) as exc:
            return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=f"LdpEncodeMod: {exc}"), reply_to=msg)

    def _next(self, call_next: Callable[[Message, Context], Message], msg: Message, context: Context) -> Message:
        """``call_next``; the first time, watching for a size mod inside this one (module docstring)."""
        if self.warned:
            return call_next(msg, context)
        lines = SizeModLines()
        flower = logging.getLogger("flwr")
        flower.addFilter(lines)
        try:
            return call_next(msg, context)
        finally:
            flower.removeFilter(lines)
            self.warned = True
            warn_size_mods_inside(lines.mods)

    @staticmethod
    def report(context: Context, delta: float = 1e-5) -> dict[str, Any]:
        """This node's client's own ledger report (messages, ε at ``delta``, the node's budget), for its operator."""
        return client_ledger.client_report(context, partition(context), delta)

    def _encode_reply(self, msg: Message, reply: Message, sent: ArrayRecord, s: LdpSettings, context: Context,
                      enc: Encoder) -> None:
        """Replace ``reply``'s arrays by the wire message of ``Δ = θ_sent − θ_reply``; charge the client's
        ledger once the message exists, before it leaves."""
        key, local = single(reply.content.array_records, "the ClientApp's train reply")
        if list(local.keys()) != list(sent.keys()):
            raise LdpModError("the train reply's ArrayRecord must have the keys of the one received (the local model)")
        delta = flatten(sent) - flatten(local)
        if delta.size != enc.dim:
            raise LdpModError(f"the train reply's model has {delta.size} parameters, the one received {enc.dim}")
        blob = encode_one(enc, delta, server_round(msg), s, partition(context))
        found = client_ledger.budgets(s.budget_epsilon, s.budget_delta, context.node_config)
        client_ledger.charge(context, partition(context), enc.privacy_event(), found, s.budget_delta)
        reply.content.array_records[key] = ArrayRecord({WIRE_KEY: wire_array(blob)})
        if legacy.is_fit(msg):
            legacy.reduce_metrics(reply, self.metrics)
            return
        self._reduce_metrics(reply)
        if not wrapped_server(msg):
            count_one_message(reply)

    def _reduce_metrics(self, reply: Message) -> None:
        """Keep the reply's metrics, only ``num-examples``, or none (``metrics``)."""
        if self.metrics == "keep":
            return
        for k, m in list(reply.content.metric_records.items()):
            kept = {"num-examples": m["num-examples"]} if self.metrics == "num-examples" and "num-examples" in m else {}
            reply.content.metric_records[k] = MetricRecord(kept)


def partition(context: Context) -> int:
    """The client's identity for reproducible coins: its partition id, else its node id."""
    return int(context.node_config.get("partition-id", context.node_id))  # type: ignore[arg-type]


def public_spec(enc: Encoder) -> str:
    """An encoder's whole public configuration in one line: canonical spec, dimension, ε, radius,
    frame seed and the wire fingerprint (the CRC-32 of the rest, all a message header carries)."""
    rnd = getattr(enc, "round", None)
    return (f"{enc.spec} (dim {enc.dim}, epsilon {enc.epsilon:g}, radius {enc.radius:g}, frame seed {enc.seed}"
            f"{'' if rnd is None else f', frame of round {rnd}'}, fingerprint {enc.fingerprint:#010x})")


def wrapped_server(msg: Message) -> bool:
    """The train message carries :class:`LdpDecoding`'s fingerprint (its server decodes LDP messages)."""
    return any(KEY_FINGERPRINT in conf for conf in msg.content.config_records.values())


def check_pairing(msg: Message) -> None:
    """Refuse a train message of SecAgg+ (its ``secaggplus_mod`` stages, or the fit it wraps): SecAgg+
    sums the clients' vectors, whereas each LDP message reaches the server whole to be decoded."""
    if RECORD_KEY_CONFIGS in msg.content.config_records:
        raise LdpModError("LdpEncodeMod cannot run with SecAgg+ (secaggplus_mod / SecAggPlusWorkflow): SecAgg+ sums the clients' "
                          "vectors, an LDP message must reach the server whole to be decoded; remove SecAgg+ "
                          "(each LDP message protects its client by itself)")


def check_server(msg: Message, enc: Encoder) -> None:
    """Refuse a server that decodes another configuration (it says so in the train config)."""
    for conf in msg.content.config_records.values():
        if KEY_FINGERPRINT in conf and int(conf[KEY_FINGERPRINT]) != enc.fingerprint:  # type: ignore[arg-type]
            raise LdpModError(f"{MISMATCH}the server decodes {conf.get(KEY_ENCODER, '?')!s} "
                              f"but this client encodes {public_spec(enc)}")


def count_one_message(reply: Message) -> None:
    """For a server without :class:`LdpDecoding`: the reply's one MetricRecord says ``num-examples = 1``
    (a constant, nothing about the data) unless it already has a count, so that Flower's reply
    validation passes and the strategy stops at the wire message, whose ``stype`` names the wrapper."""
    recs = reply.content.metric_records
    if not recs:
        reply.content["metrics"] = MetricRecord({"num-examples": 1})
    elif len(recs) == 1:
        rec = next(iter(recs.values()))
        if "num-examples" not in rec:
            rec["num-examples"] = 1


class SizeModLines(logging.Filter):
    """Notes which of Flower's size mods logged a line on this thread (:data:`SIZE_LINES`); every record passes."""

    def __init__(self) -> None:
        super().__init__()
        self.thread, self.mods = threading.get_ident(), set[str]()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread == self.thread:
            line = str(record.msg)
            self.mods |= {mod for start, mod in SIZE_LINES.items() if line.startswith(start)}
        return True


def warn_size_mods_inside(mods: set[str]) -> None:
    """Warn that the size mods ``mods`` run after this one, where they measure the local model instead of what
    leaves the client."""
    if mods:
        log.warning("LdpEncodeMod: %s runs after LdpEncodeMod and reports the local model's size, not what is sent: "
                    "list it before LdpEncodeMod in ClientApp(mods=[...])", ", ".join(sorted(mods)))


def encode_one(enc: Encoder, delta: np.ndarray, t: int, s: LdpSettings, client: int) -> bytes:
    """One client's wire message for round ``t``: ``Δ`` (non-finite → the null input 0) encoded with
    a fresh OS-CSPRNG key (secure) or the ``(seed, t, client)`` coins (reproducible)."""
    x = torch.from_numpy(delta.astype(np.float32))[None, :]
    if not bool(torch.isfinite(x).all()):
        x = torch.zeros_like(x)
    keys = fresh_keys(1) if s.randomness == "secure" else encoder_seeds(s.seed, t, np.array([client]))
    return wire.pack(enc, enc.encode(x, keys), round=t)[0]
