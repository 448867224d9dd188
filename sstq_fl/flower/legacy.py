"""``LegacyLdpDecoding``: :class:`sstq_fl.flower.LdpDecoding` for Flower's legacy strategies.

Flower's legacy API (``flwr.server.strategy``: ``FedAvg``, ``FedAdam``, ...; run by ``LegacyContext`` +
``DefaultWorkflow`` or ``ServerApp(server_fn=...)``, with ``NumPyClient`` apps) calls a strategy's
``initialize_parameters`` / ``configure_fit`` / ``aggregate_fit`` on ``Parameters`` and ``FitRes``
(https://flower.ai/docs/framework/ref-api/flwr.server.strategy.Strategy.html), which the Message-API
wrapper does not have.  This wrapper does what that one does, on the legacy types::

    strategy = LegacyLdpDecoding(FedAvg(fraction_fit=0.5, fraction_evaluate=0.0), encoder="privunit",
                                 epsilon=3.0, radius=0.01)
    DefaultWorkflow()(grid, LegacyContext(context=context, config=ServerConfig(num_rounds=3), strategy=strategy))

* ``configure_fit``: the inner strategy samples and configures; every ``FitIns.config`` gets the
  encoder's fingerprint and ``server-round`` (the legacy workflow sends no round), and the ledger is
  charged for every asked client before the messages leave.
* ``aggregate_fit``: each ``FitRes`` whose one tensor is a wire message (``tensor_type`` =
  :data:`sstq_fl.flower.WIRE_STYPE`) is decoded; the valid ones are averaged uniformly in the
  encoder's accumulation space (:func:`sstq_fl.aggregation.decode_mean`), the mean capped at
  ``server_cap``, and the inner strategy's ``aggregate_fit`` receives **one** ``FitRes`` holding
  ``θ_global − mean(Δ̂)`` with ``num_examples`` = the number of messages and the metrics every reply
  reports averaged uniformly.  ``epsilon-spent`` is added to the returned metrics.  A round in which
  no valid message arrived raises :class:`sstq_fl.flower.EmptyRound` with its one-line cause (the mod
  missing: "no LDP message in any reply of round N: is LdpEncodeMod in the ClientApp's mods?"), or
  keeps the model with ``allow_empty_rounds=True``.
* Evaluation (``configure_evaluate``, ``aggregate_evaluate``, ``evaluate``) is the inner strategy's.

The ledger is planned for ``num_rounds`` messages per client when given (refusing a plan over
``budget_epsilon``); without it (a legacy strategy is never told the number of rounds) it records
the rounds as they come.  Flower's legacy DP wrappers (``DifferentialPrivacy*``) and SecAgg+ add noise
to, or sum, the clients' vectors; neither applies to LDP messages, which the mod refuses to send
under SecAgg+.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from flwr.common import (
    Code,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    NDArrays,
    Parameters,
    Scalar,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy as LegacyStrategy
from flwr.serverapp.strategy import Strategy as MessageStrategy

from ..aggregation import charge_joins, decode_mean
from ..encoders import Encoder
from ..privacy.ledger import PrivacyLedger
from ..progress import configure_logging
from .decoding import NO_MESSAGE, EmptyRound, WrongApi, empty_round_cause, new_ledger, uniform_metrics
from .mod import KEY_ENCODER, KEY_FINGERPRINT, WIRE_STYPE, LdpSettings, encoder_for, public_spec

log = logging.getLogger("sstq_fl.flower")
LEGACY_API = ("LegacyLdpDecoding wraps a legacy flwr.server.strategy strategy (LegacyContext, DefaultWorkflow, "
              "ServerApp(server_fn=...)); for a Message-API flwr.serverapp.strategy strategy use "
              "sstq_fl.flower.LdpDecoding and strategy.start(grid, ...)")
FitResults = list[tuple[ClientProxy, FitRes]]
Failures = list[tuple[ClientProxy, FitRes] | BaseException]


def check_legacy(strategy: object) -> None:
    """Refuse anything but a legacy strategy, naming the Message-API wrapper for a Message-API one."""
    if isinstance(strategy, MessageStrategy) or not isinstance(strategy, LegacyStrategy):
        raise WrongApi(f"{LEGACY_API}: got {type(strategy).__module__}.{type(strategy).__name__}")


def flat(arrays: NDArrays) -> np.ndarray:
    """The arrays raveled and concatenated, as float64 (the mod's order: ``"0"``, ``"1"``, ...)."""
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays]) if arrays else np.zeros(0)


def unflat(vec: np.ndarray, like: NDArrays) -> NDArrays:
    """Inverse of :func:`flat`: ``vec`` cut into ``like``'s shapes and dtypes."""
    out, at = [], 0
    for a in like:
        out.append(np.ascontiguousarray(vec[at:at + a.size].reshape(a.shape).astype(a.dtype)))
        at += a.size
    return out


def wire_tensor(res: FitRes) -> bytes:
    """A reply's wire message (``ValueError`` naming what is wrong)."""
    p = res.parameters
    if p.tensor_type != WIRE_STYPE or len(p.tensors) != 1:
        raise ValueError(f"reply without an LDP message {NO_MESSAGE}")
    return bytes(p.tensors[0])


def failure_reason(f: tuple[ClientProxy, FitRes] | BaseException) -> tuple[int, str]:
    """A legacy failure's node (``-1`` when Flower keeps only the error) and its one-line reason."""
    if isinstance(f, BaseException):
        err = f.args[0] if f.args else f
        reason = str(getattr(err, "reason", err)).splitlines() or ["no reason given"]
        return -1, f"client error: {reason[0]}"
    return int(f[0].node_id), f"fit status {f[1].status.code.name}: {f[1].status.message}"


class LegacyLdpDecoding(LegacyStrategy):
    """Wrap a legacy ``strategy``: decode the clients' LDP messages, hand it their average (module doc)."""

    def __init__(self, strategy: LegacyStrategy, encoder: str, epsilon: float, radius: float, *, frame_seed: int = 0,
                 server_cap: float | None = None, delta: float = 1e-5, budget_epsilon: float | None = None,
                 num_rounds: int | None = None, allow_empty_rounds: bool = False):
        check_legacy(strategy)
        self.strategy, self.settings = strategy, LdpSettings(encoder, float(epsilon), float(radius), frame_seed=frame_seed)
        self.server_cap, self.delta, self.budget_epsilon, self.num_rounds = server_cap, delta, budget_epsilon, num_rounds
        self.allow_empty_rounds = allow_empty_rounds
        self.enc: Encoder | None = None
        self.ledger: PrivacyLedger | None = None
        self.joins: dict[int, int] = {}  # messages per node, the ledger's basis
        self.last: dict[str, Any] = {}  # the last round: round, clients, senders, dropped [{client, reason}]
        self._asked: list[int] = []
        self._global: NDArrays = []
        configure_logging()

    def __repr__(self) -> str:
        s = self.settings
        return f"LegacyLdpDecoding({self.strategy!r}, encoder={s.encoder!r}, epsilon={s.epsilon}, radius={s.radius})"

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return self.strategy.initialize_parameters(client_manager)

    def prepare(self, arrays: NDArrays) -> Encoder:
        """The encoder for ``arrays``' dimension, and the ledger (module doc)."""
        s = self.settings
        self.enc = encoder_for(s.encoder, int(flat(arrays).size), s.epsilon, s.radius, s.frame_seed)
        self.ledger = new_ledger(self.enc, self.num_rounds, self.budget_epsilon, self.delta)
        log.info("LegacyLdpDecoding: encoder %s, epsilon %s per message, radius %s, server cap %s",
                 s.encoder, s.epsilon, s.radius, self.server_cap)
        return self.enc

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        self._global = parameters_to_ndarrays(parameters)
        base = self.enc or self.prepare(self._global)
        sent = self.strategy.configure_fit(server_round, parameters, client_manager)
        enc = base.for_round(server_round)  # the round's public frame: its fingerprint names the round
        for _, ins in sent:
            ins.config = {**ins.config, KEY_FINGERPRINT: enc.fingerprint, KEY_ENCODER: public_spec(enc),
                          "server-round": server_round}
        self._asked = [int(proxy.node_id) for proxy, _ in sent]
        for node in self._asked:
            self.joins[node] = self.joins.get(node, 0) + 1
        assert self.ledger is not None
        charge_joins(self.ledger, base, list(self.joins.values()), server_round)
        return sent

    def _read(self, results: FitResults, failures: Failures
              ) -> tuple[list[int], list[bytes], list[dict[str, Scalar]], list[dict[str, Any]]]:
        """The replies' nodes, wire messages and metrics, in node order; the others, with why they are left out."""
        nodes, blobs, metrics, dropped = [], [], [], []
        for proxy, res in sorted(results, key=lambda r: int(r[0].node_id)):
            node = int(proxy.node_id)
            try:
                if node in nodes:
                    raise ValueError("second reply from the same client in one round (replay) ignored")
                blobs.append(wire_tensor(res))
            except ValueError as exc:
                dropped.append({"client": node, "reason": f"malformed reply: {str(exc)[:2000]}"})
                continue
            nodes.append(node)
            metrics.append(dict(res.metrics))
        dropped += [{"client": n, "reason": r} for n, r in map(failure_reason, failures)]
        return nodes, blobs, metrics, dropped

    def aggregate_fit(self, server_round: int, results: FitResults, failures: Failures
                      ) -> tuple[Parameters | None, dict[str, Scalar]]:
        assert self.enc is not None and self.ledger is not None
        nodes, blobs, metrics, dropped = self._read(results, failures)
        dtype = torch.float32 if all(a.dtype == np.float32 for a in self._global) else torch.float64
        got = decode_mean(self.enc.for_round(server_round), blobs, server_round, self.server_cap, dtype)
        dropped += [{"client": nodes[i], "reason": why} for i, why in got.rejected]
        ok = sorted(set(range(len(nodes))) - {i for i, _ in got.rejected})
        self.last = {"round": server_round, "clients": len(self._asked), "senders": [nodes[i] for i in ok], "dropped": dropped}
        for d in dropped:
            log.warning("round %d: client %s left out: %s", server_round, d["client"], d["reason"])
        log.info("aggregate_fit: uniform mean of %d LDP messages (%d left out)", len(ok), len(dropped))
        if got.mean is None:
            if dropped and not self.allow_empty_rounds:
                raise EmptyRound(empty_round_cause(server_round, dropped, self.enc))
            return None, {}
        return self._inner(server_round, got.mean, [results[0][0]], [metrics[i] for i in ok])

    def _inner(self, server_round: int, mean: torch.Tensor, proxy: list[ClientProxy], metrics: list[dict[str, Scalar]]
               ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Hand the inner strategy one ``FitRes``: ``θ_global − mean`` and the clients' averaged metrics."""
        assert self.ledger is not None
        theta = unflat(flat(self._global) - mean.double().numpy(), self._global)
        avg = uniform_metrics(metrics, "num_examples")
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(theta), int(avg.pop("num_examples")), avg)
        params, out = self.strategy.aggregate_fit(server_round, [(proxy[0], res)], [])
        out = {**out, "epsilon-spent": float(self.ledger.epsilon(self.delta))}
        return params, out

    def configure_evaluate(self, server_round: int, parameters: Parameters,
                           client_manager: ClientManager) -> list[tuple[ClientProxy, EvaluateIns]]:
        return self.strategy.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(self, server_round: int, results: list[tuple[ClientProxy, EvaluateRes]],
                           failures: list[tuple[ClientProxy, EvaluateRes] | BaseException]
                           ) -> tuple[float | None, dict[str, Scalar]]:
        return self.strategy.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        return self.strategy.evaluate(server_round, parameters)
