"""The server side of ``trust=secagg`` on Flower: Flower's own SecAgg+ workflow around a strategy that decodes the sum.

Flower's ``SecAggPlusWorkflow`` (inside its ``DefaultWorkflow``, with a ``LegacyContext``) runs the protocol; the
server sees each node's masked vector and, after unmasking, only their sum.  :class:`SecAggDecoding` is the legacy
strategy it drives:

* ``configure_fit`` samples the round's clients from ``(seed, round)`` as the in-process engine does, charges the
  central ledger and writes the transcripts before any share leaves, and sends each sampled node ``θ``;
* ``aggregate_fit`` receives SecAgg+'s aggregate (the same vector in every result), recovers the modular sum
  (:func:`~.secagg_client.recovered_sum`), decodes it into the noisy mean, caps it at ``server_cap`` and steps ``θ``;
* ``evaluate`` evaluates ``θ`` and, after a round, records and checkpoints it as every engine does.

Each node shares its secrets with a logarithmic number of neighbours, a majority of whom reconstruct
(:func:`~.secagg_client.secaggplus_graph`).  The workflow halts after collecting the masked vectors, before any
unmasking, when fewer than the stage's fewest survivors (:attr:`SecureAggregation.min_clients`) sent theirs: the
server never learns a sum with fewer noise shares than the round is charged for, and the round releases nothing.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from flwr.common import (
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from sstq_fl.aggregation import cap_norm
from sstq_fl.fl.engine import RoundState, Trainer

from .secagg_client import recovered_sum

log = logging.getLogger("sstq_fl.fl")


class SecAggDecoding(Strategy):
    """The legacy strategy SecAgg+ drives: sample, charge, decode the secure sum, step, record."""

    def __init__(self, trainer: Trainer, state: RoundState, out: Path, nodes: dict[int, int], progress: bool,
                 send_config: bool):
        self.tr, self.st, self.out, self.nodes, self.progress = trainer, state, out, nodes, progress
        self.offset = state.round
        self.cfg_json = json.dumps(asdict(trainer.cfg), sort_keys=True) if send_config else ""
        self.sampled: np.ndarray = np.zeros(0, np.int64)
        self.unreachable: list[int] = []
        self.survivors = 0
        self.t0 = 0.0

    @property
    def stage(self) -> Any:
        return self.tr.trusted

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        assert self.st.theta is not None
        return ndarrays_to_parameters([self.st.theta.numpy()])

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        self.t0, t = time.perf_counter(), self.offset + server_round
        self.sampled = self.tr.participants(t)
        proxies = client_manager.all()
        targets = [int(c) for c in self.sampled if str(self.nodes.get(int(c))) in proxies]
        self.unreachable = sorted(set(int(c) for c in self.sampled) - set(targets))
        self.survivors = 0
        self.tr.charge_round(self.st, t, np.asarray(targets, dtype=np.int64))  # charged and written before sent
        if not self.stage.charged(len(targets)):
            return []  # fewer than the threshold: SecAgg+ could not complete; nothing is sent or released
        config: dict[str, Scalar] = {"server-round": t, **({"run-config": self.cfg_json} if self.cfg_json else {})}
        return [(proxies[str(self.nodes[c])], FitIns(parameters, config)) for c in targets]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list[Any]) -> tuple[Parameters | None, dict[str, Scalar]]:
        sa, cfg, n = self.stage, self.tr.cfg, len(results)
        assert self.st.theta is not None
        if not results or not sa.charged(n):
            return None, {}
        t = self.offset + server_round
        vector = parameters_to_ndarrays(results[0][1].parameters)[0]
        mean = sa.mean(recovered_sum(vector, n, sa.codec.bits), n, t)
        self.st.theta = self.st.theta - cfg.lr * cap_norm(mean.to(self.st.theta.dtype), cfg.server_cap)
        self.survivors = n
        return ndarrays_to_parameters([self.st.theta.numpy()]), {}

    def configure_evaluate(self, server_round: int, parameters: Parameters,
                           client_manager: ClientManager) -> list[tuple[ClientProxy, EvaluateIns]]:
        return []  # the server evaluates θ itself

    def aggregate_evaluate(self, server_round: int, results: list[tuple[ClientProxy, EvaluateRes]],
                           failures: list[Any]) -> tuple[float | None, dict[str, Scalar]]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Round 0: nothing to record.  Round ``r``: record it (with the clients that did not survive) and checkpoint."""
        if server_round == 0:
            return None
        t, sent = self.offset + server_round, set(int(c) for c in self.sampled) - set(self.unreachable)
        rec: dict[str, Any] = {"round": t, "clients": len(self.sampled),
                               "dropped": [{"client": c, "reason": "node not connected"} for c in self.unreachable],
                               "bits_per_client": self.stage.share_bits() if self.survivors else 0}
        if not self.survivors:
            rec["dropped"] += [{"client": c, "reason": "the secure sum did not complete"} for c in sorted(sent)]
        self.tr.close_round(self.st, rec, self.survivors)
        self.tr.complete_round(self.out, self.st, rec, time.perf_counter() - self.t0, self.progress)
        return None


def serve_secagg(grid: Any, tr: Trainer, st: RoundState, out: Path, progress: bool, send_config: bool,
                 timeout: float) -> None:
    """Run the remaining rounds of ``tr`` through Flower's SecAgg+ (``DefaultWorkflow(fit_workflow=SecAggPlusWorkflow)``
    in a ``LegacyContext`` holding :class:`SecAggDecoding`)."""
    from flwr.app import Context, RecordDict
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    from sstq_fl.fl.secure_aggregation import SecureAggregation
    from sstq_fl.flower.discovery import discover

    from .secagg_client import secaggplus_graph, secaggplus_ranges

    cfg, sa = tr.cfg, tr.trusted
    assert isinstance(sa, SecureAggregation)
    strategy = SecAggDecoding(tr, st, out, discover(grid, cfg.clients), progress, send_config)
    shares, threshold = secaggplus_graph(cfg.clients)
    needed = sa.min_clients

    class Guarded(SecAggPlusWorkflow):  # type: ignore[misc]
        def collect_masked_vectors_stage(self, grid: Any, context: Any, state: Any) -> bool:
            """SecAgg+'s stage, then halt before unmasking unless the charged number of masked shares arrived."""
            ok = super().collect_masked_vectors_stage(grid, context, state)
            if ok and len(state.active_node_ids) < needed:
                log.warning("secure sum halted before unmasking: %d masked shares, %d needed",
                            len(state.active_node_ids), needed)
                return False
            return bool(ok)

    workflow = Guarded(num_shares=shares, reconstruction_threshold=threshold, timeout=timeout,
                       **secaggplus_ranges(sa.codec.bits, cfg.clients))
    base = Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={})
    context = LegacyContext(base, config=ServerConfig(num_rounds=cfg.rounds - st.round), strategy=strategy)
    DefaultWorkflow(fit_workflow=workflow)(grid, context)
