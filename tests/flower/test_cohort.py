"""Cohort nodes (issue 16): a simulated node hosts M virtual clients, batched; each stays a client of its own."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, Metadata, MetricRecord, RecordDict
from flwr.app.message.message import make_message
from flwr.serverapp.strategy import FedAvg

from sstq_fl.fl.engine import RunConfig, Trainer
from sstq_fl.flower.cohort import (
    COHORT_MESSAGE_TYPE,
    KEY_COHORT,
    CohortDecoding,
    cohort_record,
    message_key,
    node_clients,
    node_count,
)
from sstq_fl.flower.mod import wire_array

T = 3
CFG = dict(task="lsq", dim=12, n=400, clients=40, batch=10, clip=1.0, lr=0.5, rounds=4, encoder="sstq-flat:b=4",
           clients_per_node=10)


def _msg(cfg: RunConfig, ids: list[int], node: int, theta: np.ndarray) -> Message:
    """The server's ``train.cohort`` message to ``node`` for clients ``ids`` (as the in-process launcher sends it)."""
    md = Metadata(run_id=1, message_id=f"m{node}", src_node_id=0, dst_node_id=node, reply_to_message_id="", group_id="",
                  created_at=time.time(), ttl=600.0, message_type=COHORT_MESSAGE_TYPE)
    conf = ConfigRecord({"server-round": T, KEY_COHORT: ids, "run-config": json.dumps(asdict(cfg), sort_keys=True)})
    return make_message(md, content=RecordDict({"arrays": ArrayRecord({"theta": Array(theta)}), "config": conf}))


def _context(partition: int) -> Context:
    return Context(run_id=1, node_id=100 + partition, node_config={"partition-id": partition, "num-partitions": 4},
                   state=RecordDict(), run_config={})


def test_nodes_and_their_clients():
    assert node_count(40, 10) == 4 and node_count(41, 10) == 5 and node_count(7, 1) == 7
    assert list(node_clients(4, 41, 10)) == [40] and list(node_clients(1, 40, 10)) == list(range(10, 20))
    with pytest.raises(ValueError, match="clients per node"):
        RunConfig(clients=4, clients_per_node=5)


def test_a_cohort_node_sends_the_in_process_engines_messages_one_per_virtual_client(run_identity):
    """Reproducible: exactly the in-process engine's bytes; secure: each virtual client its own fresh coins."""
    from sstq_fl.flower.apps.sstq_client import cohort

    cfg = RunConfig(randomness="reproducible", **CFG)
    tr = Trainer(cfg)
    theta = tr.task.init_params(0).numpy()
    ids = [10, 11, 13, 19]
    reply = cohort(_msg(cfg, ids, 101, theta), _context(1))
    expect, _ = tr.client_messages(torch.from_numpy(theta), T, np.array(ids))
    rec = reply.content.array_records["arrays"]
    assert list(rec.keys()) == [message_key(c) for c in ids] and [rec[message_key(c)].data for c in ids] == expect

    secure = RunConfig(randomness="secure", **CFG)
    draws = [cohort(_msg(secure, ids, 101, theta), _context(1)).content.array_records["arrays"] for _ in range(6)]
    # fresh keys, every message: a client's 9-bit payload repeats across two calls with probability
    # ≥ 1/512, across six calls with at most (its largest output probability)^5
    assert all(len({d[message_key(c)].data for d in draws}) > 1 for c in ids)
    with pytest.raises(ValueError, match="this node hosts range"):
        cohort(_msg(cfg, [10, 25], 101, theta), _context(1))  # client 25 lives on node 2


def test_a_deployment_serverapp_refuses_cohorts_before_sending_anything(monkeypatch, tmp_path):
    from sstq_fl.flower.apps.sstq_server import main

    rc = {"task": "lsq", "dim": 12, "clients": 40, "clients-per-node": 10, "out-dir": str(tmp_path)}
    monkeypatch.setattr("sys.argv", ["/venv/bin/flwr-serverapp"])
    with pytest.raises(ValueError, match="clients-per-node = 10: cohort nodes are for simulation only"):
        main(object(), Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))  # no grid call
    assert not (tmp_path / "metrics.json").exists()


def test_a_deployment_clientapp_refuses_a_cohort_message_a_simulated_node_runs_it(run_identity, monkeypatch):
    from sstq_fl.flower.apps.sstq_client import cohort

    cfg = RunConfig(randomness="reproducible", **CFG)
    theta = Trainer(cfg).task.init_params(0).numpy()
    monkeypatch.setattr("sys.argv", ["/venv/bin/flwr-clientapp"])
    with pytest.raises(ValueError, match="cohort nodes are for simulation only"):
        cohort(_msg(cfg, [10], 101, theta), _context(1))
    monkeypatch.setattr("sys.argv", ["/venv/bin/flwr-simulation"])
    assert list(cohort(_msg(cfg, [10], 101, theta), _context(1)).content.array_records["arrays"]) == [message_key(10)]


class _Sent(FedAvg):
    """An inner strategy whose round is the given cohort messages."""

    def __init__(self, msgs: list[Message]):
        super().__init__()
        self.msgs = msgs

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Any) -> list[Message]:
        return self.msgs


def _reply(to: Message, content: RecordDict | Error) -> Message:
    node = int(to.metadata.dst_node_id)
    md = Metadata(run_id=1, message_id="", src_node_id=node, dst_node_id=0, reply_to_message_id=f"m{node}", group_id="",
                  created_at=time.time(), ttl=600.0, message_type=COHORT_MESSAGE_TYPE)
    return make_message(md, content=content) if isinstance(content, RecordDict) else make_message(md, error=content)


def test_the_server_validates_and_charges_each_virtual_client_on_its_own(run_identity):
    cfg = RunConfig(randomness="reproducible", **CFG)
    tr = Trainer(cfg)
    theta = tr.task.init_params(0).numpy()
    sent = [_msg(cfg, [0, 1, 2], 101, theta), _msg(cfg, [10, 11], 102, theta), _msg(cfg, [20], 103, theta),
            _msg(cfg, [30], 104, theta)]
    ldp = CohortDecoding(_Sent(sent), cfg.encoder, cfg.epsilon, cfg.clip, frame_seed=cfg.seed,
                         identify=lambda node: node - 101)
    arrays = ArrayRecord({"theta": Array(theta)})
    ldp.prepare(arrays, 1)
    ldp.configure_train(T, arrays, ConfigRecord({"server-round": T}), None)  # type: ignore[arg-type]
    blobs = {c: b for ids in ([0, 1], [10, 11]) for c, b in zip(ids, tr.client_messages(torch.from_numpy(theta), T,
                                                                                         np.array(ids))[0])}
    blobs[11] = b"\x00garbage"
    metrics = RecordDict({"metrics": MetricRecord({"num-examples": 10})})
    replies = [_reply(sent[0], RecordDict({"arrays": cohort_record([0, 1], [blobs[0], blobs[1]]), **metrics})),
               _reply(sent[1], RecordDict({"arrays": cohort_record([10, 11], [blobs[10], blobs[11]]), **metrics})),
               _reply(sent[2], Error(code=0, reason="injected fault")),
               _reply(sent[3], RecordDict({"arrays": ArrayRecord({message_key(31): wire_array(blobs[0])}), **metrics}))]
    new, got = ldp.aggregate_train(T, replies)
    reasons = {d["client"]: d["reason"] for d in ldp.last["dropped"]}
    assert new is not None and ldp.last["senders"] == [0, 1, 10] and ldp.last["clients"] == 7
    assert "holds no message for it" in reasons[2] and "truncated" in reasons[11] and "client raised" in reasons[20]
    assert "did not ask" in reasons[30] and "epsilon-spent" in got
    # every asked virtual client is charged before its node's message leaves, whatever its reply
    assert ldp.joins == {0: 1, 1: 1, 2: 1, 10: 1, 11: 1, 20: 1, 30: 1}


def test_injected_faults_hit_one_virtual_client_or_its_whole_node(run_identity, monkeypatch):
    from sstq_fl.flower.apps.sstq_client import cohort

    from .faults import fault_injection_mod

    cfg = RunConfig(randomness="reproducible", **CFG)
    theta = Trainer(cfg).task.init_params(0).numpy()
    monkeypatch.setenv("SSTQ_FL_FAULTS", json.dumps([{"client": 11, "round": T, "kind": "garbage"},
                                                     {"client": 25, "round": T, "kind": "raise"}]))
    rec = fault_injection_mod(_msg(cfg, [10, 11], 101, theta), _context(1), cohort).content.array_records["arrays"]
    assert rec[message_key(11)].data == b"\x00garbage" and rec[message_key(10)].data != b"\x00garbage"
    with pytest.raises(RuntimeError, match="client 25 raises"):
        fault_injection_mod(_msg(cfg, [20, 25], 102, theta), _context(2), cohort)
