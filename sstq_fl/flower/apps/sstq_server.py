"""The project's ServerApp: Flower's ``FedAvgM`` wrapped in :class:`sstq_fl.flower.LdpDecoding`.

Built from the two pieces any Flower app can use (``LdpEncodeMod`` in the ClientApp,
``LdpDecoding`` around the strategy), with Flower's conventions: the model travels as the
ArrayRecord ``arrays`` (key ``theta``), the round as ``server-round``, the clients' replies carry
``num-examples``, and the server evaluates through ``evaluate_fn`` (round 0 included).

* The inner strategy, :class:`SstqSampling`, is ``FedAvgM`` with the server learning rate ``lr``
  and no momentum: ``θ ← θ − lr·(θ − θ̃) = θ − lr·ḡ`` where ``θ̃ = θ − ḡ`` is what the wrapper
  hands it (``ḡ``: the decoded, capped mean of the clients' clipped minibatch gradients, sent as
  the pseudo-gradient of a unit local step).  It overrides only ``configure_train``: the round's
  participants are sampled from ``(seed, round)`` exactly as the in-process engine samples them
  (Flower's node sampler knows no partitions), mapped to nodes by discovery
  (:func:`sstq_fl.flower.discovery.discover`), re-mapped when a SuperNode restarts.
* The wrapper charges the run's privacy ledger for every client a round's train messages ask, and
  the transcript is written (``Trainer.write_transcripts``), before the messages are sent: a message
  that leaves is always charged, a client whose reply is lost stays charged.  It validates and decodes
  the wire bytes (invalid replies left out with their reason), averages in frame coordinates and caps
  at ``server-cap``.
* Cohort nodes (simulation, ``clients_per_node`` M > 1, ``--clients-per-node`` / run-config key
  ``clients-per-node``): node ``k`` hosts the virtual clients ``k·M .. k·M + M − 1``; a round sends
  each node with sampled clients one ``train.cohort`` message naming them, and
  :class:`sstq_fl.flower.cohort.CohortDecoding` treats each virtual client's wire message as a
  separate client (validation, reasons, participation, ledger).  A deployment keeps one client
  per SuperNode.
* :class:`RunRecorder` is the ``evaluate_fn``: it evaluates ``θ`` and, after each round, records
  the round, checkpoints atomically and rewrites the transcript (``Trainer.complete_round``), so
  the same config and seed give the in-process engine's metrics (tests/flower/test_simulation.py).

Entry points: ``app`` (``flwr run .``, configured from ``[tool.flwr.app.config]``; the run-config
key ``workload`` selects training or a DP generative workload) and :func:`run_flower` /
:func:`run_flower_many` (``sstq-fl run --engine flower``: Flower's simulation engine in process).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvgM

from sstq_fl.config.catalog import APP_KEYS
from sstq_fl.config.flower import (
    ROUND_TIMEOUT_S,
    config_from_run_config,
    round_timeout,
    tracking_from_run_config,
    workload_of,
)
from sstq_fl.config.train import RunConfig
from sstq_fl.fl.checkpoint import finished_run
from sstq_fl.fl.engine import METRIC_KEYS, RoundState, Trainer
from sstq_fl.flower import LdpDecoding
from sstq_fl.flower.cohort import COHORT_MESSAGE_TYPE, KEY_COHORT, CohortDecoding, node_count, refuse_in_deployment
from sstq_fl.flower.discovery import discover
from sstq_fl.flower.logs import summary_level
from sstq_fl.flower.simulation import backend_config, client_resource, simulate
from sstq_fl.flower.stopping import StoppableGrid
from sstq_fl.gen.pipelines import prefixes, workloads
from sstq_fl.progress import configure_logging
from sstq_fl.tracking import check_spec

log = logging.getLogger("sstq_fl.fl")
_METRICS = ("train_loss", *METRIC_KEYS, "bits_per_client", "epsilon_spent")


class SstqSampling(FedAvgM):
    """``FedAvgM(server_learning_rate=lr)`` whose participants are the run's ``(seed, round)`` sample.

    Flower's rounds ``1..num_rounds`` map to the run's rounds ``offset+1..`` (``offset``: rounds
    already completed in the checkpoint), sent as ``server-round``.  ``send_config``: the run
    config travels in each message (the in-process launcher, whose clients have no run config)."""

    def __init__(self, trainer: Trainer, offset: int, timeout: float, send_config: bool = False):
        self.per_node = trainer.cfg.clients_per_node
        n = self.parts = node_count(trainer.cfg.clients, self.per_node)  # partitions: one per (cohort) node
        super().__init__(min_train_nodes=n, min_available_nodes=n, server_learning_rate=trainer.cfg.lr,
                         server_momentum=0.0)
        # no federated evaluation (the server evaluates θ): set after __init__, which would log a WARNING
        # each run that the skip we ask for happens
        self.fraction_evaluate, self.min_evaluate_nodes = 0.0, 0
        self.tr, self.offset, self.timeout = trainer, offset, timeout
        self.cfg_json = json.dumps(asdict(trainer.cfg), sort_keys=True) if send_config else ""
        self._nodes: dict[int, int] | None = None
        self._by_node: dict[int, int] = {}
        self.sampled: np.ndarray = np.zeros(0, np.int64)
        self.unreachable: list[int] = []  # sampled clients whose node was not connected
        self.silent: set[int] = set()  # clients whose node did not answer last round (maybe gone)
        self.t0 = 0.0

    @property
    def nodes(self) -> dict[int, int] | None:
        """Partition → node id (``None`` before discovery); assigning it rebuilds the reverse map."""
        return self._nodes

    @nodes.setter
    def nodes(self, value: dict[int, int] | None) -> None:
        self._nodes = value
        self._by_node = {n: c for c, n in (value or {}).items()}

    def summary(self) -> None:
        log.log(summary_level(), "SstqSampling: %d clients on %d nodes, rounds %d..%d, server lr %s", self.tr.cfg.clients,
                self.parts, self.offset + 1, self.tr.cfg.rounds, self.server_learning_rate)

    def refresh_nodes(self, grid: Grid) -> set[int]:
        """Connected node ids; re-map partitions whose node left or went silent when new nodes joined.

        A SuperNode that restarts registers with a **new** node id (without SuperNode
        authentication).  The old id stays listed until its heartbeats expire, so a partition is
        re-mapped when its node is no longer connected or did not answer last round, and some
        connected node is not in the mapping yet: only those new nodes are asked for their
        partition.  With nodes that never change (simulation) this is one ``get_node_ids`` call."""
        assert self.nodes is not None
        live = set(int(n) for n in grid.get_node_ids())
        missing = {c for c in range(self.parts) if self.nodes.get(c) not in live} | self.silent
        new = live - set(self.nodes.values())
        if missing and new:
            found = discover(grid, self.parts, timeout=min(60.0, self.timeout), nodes=sorted(new))
            for c, node in sorted(found.items()):
                if c in missing or c not in self.nodes:
                    log.warning("partition %d is now served by node %d (was node %s)", c, node, self.nodes.get(c))
                    self.nodes[c] = node
            self.nodes = self.nodes  # rebuild the reverse map
        return live

    def client_of(self, node: int) -> int:
        """The partition a node serves (-1: none of this run's)."""
        return self._by_node.get(node, -1)  # per reply: a dict, not a scan of every node

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        self.t0 = time.perf_counter()
        if self.current_arrays is None:
            self.current_arrays = arrays
        if self.nodes is None:
            self.nodes = discover(grid, self.parts)
            live = set(self.nodes.values())
        else:
            live = self.refresh_nodes(grid)
        t = self.offset + server_round
        self.sampled = self.tr.participants(t)
        targets = sorted(int(c) for c in self.sampled if self.nodes.get(int(c) // self.per_node) in live)
        self.unreachable = sorted(set(int(c) for c in self.sampled) - set(targets))
        config["server-round"] = t
        if self.cfg_json:
            config["run-config"] = self.cfg_json
        if self.per_node > 1:
            return self.cohort_messages(t, arrays, config, targets)
        content = RecordDict({"arrays": arrays, "config": config})
        return [Message(content, dst_node_id=self.nodes[c], message_type=MessageType.TRAIN, group_id=str(t))
                for c in targets]

    def cohort_messages(self, t: int, arrays: ArrayRecord, config: ConfigRecord, targets: list[int]) -> list[Message]:
        """One ``train.cohort`` message per node with sampled clients, naming them (``cohort-clients``)."""
        assert self.nodes is not None
        cohorts: dict[int, list[int]] = {}
        for c in targets:
            cohorts.setdefault(c // self.per_node, []).append(c)
        return [Message(RecordDict({"arrays": arrays, "config": ConfigRecord({**config, KEY_COHORT: ids})}),
                        dst_node_id=self.nodes[k], message_type=COHORT_MESSAGE_TYPE, group_id=str(t))
                for k, ids in sorted(cohorts.items())]


class RunRecorder:
    """The ``evaluate_fn``: evaluate ``θ``; after a round, record it and checkpoint (``Trainer.complete_round``)."""

    def __init__(self, trainer: Trainer, state: RoundState, out: Path, inner: SstqSampling, ldp: LdpDecoding,
                 progress: bool):
        self.tr, self.st, self.out, self.inner, self.ldp, self.progress = trainer, state, out, inner, ldp, progress

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord:
        theta = torch.from_numpy(np.array(arrays["theta"].numpy()))
        if server_round == 0:  # what a round publishes (secure mode: nothing computed on the pooled data)
            rec0: dict[str, Any] = {"round": 0}
            self.tr.evaluate_into(RoundState(theta=theta), rec0)
            return MetricRecord({k: float(v) for k, v in rec0.items() if k != "round"})
        last, cfg = self.ldp.last, self.tr.cfg
        rec: dict[str, Any] = {"round": self.inner.offset + server_round, "clients": len(self.inner.sampled),
                               "dropped": [{"client": c, "reason": "node not connected"} for c in self.inner.unreachable]
                               + last["dropped"]}
        rec["bits_per_client"] = last["bits_per_client"]
        if last["bits_per_client"]:
            rec["bytes_per_client"] = last["bytes_per_client"]
        self.inner.silent = set(last["silent"])
        self.st.theta = theta
        assert self.st.joins is not None
        for c, n in self.ldp.joins.items():
            if c >= 0:
                self.st.joins[c] = n
        self.tr.evaluate_into(self.st, rec)
        rec["epsilon_spent"] = self.tr.ledger.epsilon(cfg.delta)
        self.tr.complete_round(self.out, self.st, rec, time.perf_counter() - self.inner.t0, self.progress)
        return MetricRecord({k: float(rec[k]) for k in _METRICS if k in rec})


def serve(grid: Grid, cfg: RunConfig, out: Path, resume: bool = False, progress: bool = False,
          deployment: bool = False, timeout: float | None = None, send_config: bool = False,
          keep_checkpoints: bool = False, log_to: str | None = None) -> dict[str, Any]:
    """Run (or resume) ``cfg`` through ``LdpDecoding(SstqSampling)``; write and return ``metrics.json``.

    ``deployment``: the metrics leave out ``train_loss`` (computed on the pooled private data,
    which a real server does not hold); ``keep_checkpoints``: leave the checkpoint once the run completes;
    ``log_to``: also log the published metrics to this tracker (:mod:`sstq_fl.tracking`); ``timeout``: a round's
    timeout in seconds (default :data:`~sstq_fl.config.flower.ROUND_TIMEOUT_S`)."""
    if cfg.diagnostics:
        raise ValueError("diagnostics (the clients' raw encoder statistics) exist on the vectorized engine only: "
                         "only the mechanism's output leaves a Flower client")
    done = finished_run(out, cfg, resume)  # a completed run (its checkpoint removed): nothing to train
    if done is not None:
        return done
    tr = Trainer(cfg, publish_train_loss=not deployment, keep_checkpoints=keep_checkpoints)
    tr.log_to = log_to
    st = tr.initial_state(out, resume)
    tr.start_tracking(out, st)
    try:
        return _serve_rounds(grid, tr, st, out, progress, send_config, timeout)
    finally:
        tr.end_tracking(None)  # a run that stopped (one that finished closed its tracker in ``finish``)


def _serve_rounds(grid: Grid, tr: Trainer, st: RoundState, out: Path, progress: bool, send_config: bool,
                  timeout: float | None) -> dict[str, Any]:
    """The rounds still to run, through SecAgg+ or ``LdpDecoding(SstqSampling)``, then ``metrics.json``."""
    cfg = tr.cfg
    if st.round == 0:
        tr.save(out, st)  # round 0: an interrupted run can always be resumed
    if st.round < cfg.rounds and cfg.trust == "secagg":
        from .secagg_server import serve_secagg

        serve_secagg(grid, tr, st, out, progress, send_config, timeout or ROUND_TIMEOUT_S)
    elif st.round < cfg.rounds:
        wait = timeout or ROUND_TIMEOUT_S
        inner = SstqSampling(tr, st.round, wait, send_config)
        decoding = CohortDecoding if cfg.clients_per_node > 1 else LdpDecoding
        ldp = decoding(inner, cfg.encoder, cfg.epsilon, cfg.clip, frame_seed=cfg.seed, server_cap=cfg.server_cap,
                       delta=cfg.delta, ledger=tr.ledger, identify=inner.client_of,
                       allow_empty_rounds=True,  # as the in-process engine: a round nobody answered leaves θ
                       on_charge=lambda: tr.write_transcripts(out))  # the round's charge written before it is sent
        ldp.joins = {c: int(n) for c, n in enumerate(st.joins if st.joins is not None else [])}
        record = RunRecorder(tr, st, out, inner, ldp, progress)
        assert st.theta is not None
        ldp.start(grid, ArrayRecord({"theta": Array(np.ascontiguousarray(st.theta.numpy()))}),
                  num_rounds=cfg.rounds - st.round, timeout=wait, evaluate_fn=record)
    return tr.finish(out, st)


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """``flwr run .``: the run-config key ``workload`` picks training (``train``) or a registered DP generative
    pipeline (:data:`sstq_fl.gen.pipelines.PIPELINES`: ``dp-mepf``, ``dp-vqg``, ``straightdp``); the rest of the
    run config configures it (``-c`` overrides)."""
    configure_logging()
    rc = dict(context.run_config)
    if workload_of(rc, workloads()) != "train":
        from .gen_server import serve_workload

        serve_workload(grid, rc)
        return
    cfg, out, resume = config_from_run_config(rc, prefixes())
    refuse_in_deployment(cfg.clients_per_node)
    final = serve(grid, cfg, out, resume, deployment=True, timeout=round_timeout(rc),
                  keep_checkpoints=bool(rc.get("keep-checkpoints", APP_KEYS["keep-checkpoints"])),
                  log_to=check_spec(tracking_from_run_config(rc).log_to))["final"]
    log.info("sstq-fl run finished: %s → %s", json.dumps(final, default=str), out / "metrics.json")


def run_flower(cfg: RunConfig, out: Path, resume: bool = False, progress: bool | None = None,
               client_cpus: float | None = None, ray_address: str | None = None, client_gpus: float | None = None,
               keep_checkpoints: bool = False, client_app: ClientApp | None = None, log_to: str | None = None,
               quiet_flower: bool = False, round_timeout: float | None = None) -> dict[str, Any]:
    """Run ``cfg`` on Flower's simulation engine (Ray), one SuperNode per client, or, with
    ``cfg.clients_per_node`` M > 1, one per cohort of M virtual clients (:mod:`sstq_fl.flower.cohort`).

    ``ray_address`` attaches to an existing Ray cluster instead
    of starting a local one; the nodes run on Ray actors spread over the cluster's workers.  Each
    node's actor gets ``client_cpus`` CPUs (default 0.5, or 1 for cohort nodes, which compute a
    batch) and ``client_gpus`` GPUs (default: 0.25 when CUDA is available, else 0), through
    Flower's client resources.  ``client_app``: the nodes' ClientApp (default: the project's,
    :data:`sstq_fl.flower.apps.sstq_client.app`), e.g. one built by
    :func:`~sstq_fl.flower.apps.sstq_client.make_client_app` with mods of your own; ``log_to``: also log the
    published metrics to this tracker (:mod:`sstq_fl.tracking`); ``quiet_flower``: hide Flower's INFO logs
    meanwhile (:func:`~sstq_fl.flower.logs.flower_logs_hidden`; the project's ClientApp then leaves the client
    ledger's lines out of Flower's log stream too); ``round_timeout``: seconds a round waits for replies
    (default :data:`~sstq_fl.config.flower.ROUND_TIMEOUT_S`).  ``ray_address``, ``client_cpus``,
    ``client_gpus`` and ``quiet_flower`` are a :class:`~sstq_fl.placement.Placement`'s (the command line's).
    """
    return run_flower_many([(cfg, out, resume)], progress, client_cpus, ray_address, client_gpus,
                           keep_checkpoints=keep_checkpoints, client_app=client_app, log_to=log_to,
                           quiet_flower=quiet_flower, round_timeout=round_timeout)[0]


def run_flower_many(jobs: list[tuple[RunConfig, Path, bool]], progress: bool | None = None,
                    client_cpus: float | None = None, ray_address: str | None = None, client_gpus: float | None = None,
                    on_result: Callable[[int, dict[str, Any]], None] | None = None, keep_checkpoints: bool = False,
                    client_app: ClientApp | None = None, log_to: str | None = None, quiet_flower: bool = False,
                    round_timeout: float | None = None) -> list[dict[str, Any]]:
    """Run several configs (e.g. one per encoder) one after another in **one** Flower simulation.

    The SuperNodes and their Ray actors are started once; each message carries its run's config, so
    the clients switch encoder with the server.  All jobs need the same ``clients`` and ``clients_per_node``.
    ``on_result(i, metrics)`` is called (in the ServerApp's thread) as soon as job ``i`` ends, so a
    caller can report each run while the next one trains; ``keep_checkpoints``: leave each completed
    run's checkpoint; ``client_app``, ``quiet_flower`` and ``round_timeout``: as in :func:`run_flower`; ``log_to``:
    each run's published metrics also go to this tracker, one tracker run per job named after its folder.

    One SIGINT (Ctrl-C) stops the simulation within seconds (:func:`~sstq_fl.flower.simulation.simulate`):
    the round in progress is abandoned, every completed round is in its run's checkpoint, and
    ``KeyboardInterrupt`` is raised here once Flower has stopped its threads and Ray.
    """
    from sstq_fl.flower.apps.sstq_client import app as project_app
    from sstq_fl.flower.apps.sstq_client import make_client_app

    nodes, cpus = _simulated_nodes(jobs, client_cpus)
    results: list[dict[str, Any]] = []
    server, stop = ServerApp(), threading.Event()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        for i, (cfg, out, resume) in enumerate(jobs):
            results.append(serve(StoppableGrid(grid, stop), cfg, out, resume, bool(progress), send_config=True,
                                 keep_checkpoints=keep_checkpoints, log_to=log_to, timeout=round_timeout))
            if on_result is not None:
                on_result(i, results[-1])

    if client_app is None:
        client_app = make_client_app(flower_log=False) if quiet_flower else project_app
    simulate(server, client_app, nodes, backend_config(cpus, ray_address, client_gpus), stop, quiet=quiet_flower)
    if len(results) < len(jobs):
        if stop.is_set():
            raise KeyboardInterrupt
        raise RuntimeError(f"the Flower run stopped after {len(results)} of {len(jobs)} runs (see the log); "
                           f"resume with --resume from {jobs[len(results)][1]}")
    return results


def _simulated_nodes(jobs: list[tuple[RunConfig, Path, bool]], client_cpus: float | None) -> tuple[int, float]:
    """The simulation's node count (one per client, or per cohort) and CPUs per node's actor (``client_cpus``,
    else 0.5, or 1 for cohort nodes); ``ValueError`` unless every job has the same clients and clients per node."""
    if len({(cfg.clients, cfg.clients_per_node) for cfg, _, _ in jobs}) != 1:
        raise ValueError("run_flower_many: every job must have the same number of clients and clients per node")
    cfg = jobs[0][0]
    cpus = client_resource(client_cpus, lambda: 1.0 if cfg.clients_per_node > 1 else 0.5)
    return node_count(cfg.clients, cfg.clients_per_node), cpus
