"""Flower's own SecAgg+ under ``trust=secagg``: the same modular sums as the vectorized engine, and its graph."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from sstq_fl.fl.engine import RunConfig, Trainer
from sstq_fl.fl.secure_aggregation import SecureAggregation

from ..fl.test_secure_aggregation import CFG


def test_flower_secaggplus_decodes_the_same_sums_as_the_vectorized_engine(tmp_path: Path) -> None:
    """Flower's own SecAgg+ (secaggplus_mod, SecAggPlusWorkflow) on 8 simulated nodes: the server sees masked
    vectors and their sum only, and decodes, round by round, the modular sums the vectorized engine computes."""
    pytest.importorskip("ray")
    from sstq_fl.flower.apps import sstq_server

    cfg = RunConfig(**{**CFG, "clients": 8, "rounds": 2, "engine": "flower"})  # 8 nodes: 7 neighbours each (SecAgg+ graph)
    seen: dict[str, dict[int, str]] = {}
    real = sstq_server.Trainer

    class Spy(real):  # type: ignore[misc, valid-type]
        def finish(self, out: Path, st: object) -> dict[str, object]:
            seen["flower"] = dict(self.trusted.sums)
            return super().finish(out, st)  # type: ignore[arg-type]

    sstq_server.Trainer = Spy
    try:
        flw = sstq_server.run_flower(cfg, tmp_path / "f")
    finally:
        sstq_server.Trainer = real
    vec_tr = Trainer(dataclasses.replace(cfg, engine="vectorized"))
    vec = vec_tr.train(tmp_path / "v")
    assert isinstance(vec_tr.trusted, SecureAggregation)
    assert seen["flower"] == vec_tr.trusted.sums and len(seen["flower"]) == 2
    assert flw["final"]["epsilon_central"]["epsilon"] == vec["final"]["epsilon_central"]["epsilon"]
    assert json.loads((tmp_path / "f" / "metrics.json").read_text())["config"]["trust"] == "secagg"


def test_secaggplus_neighbourhoods_grow_with_log_n_and_a_majority_reconstructs() -> None:
    from sstq_fl.flower.apps.secagg_client import secaggplus_graph

    assert secaggplus_graph(4) == (4, 3)  # few nodes: everyone shares with everyone
    for n in (100, 1000, 10_000):
        k, t = secaggplus_graph(n)
        assert k == 2 * math.ceil(math.log2(n)) + 1 and k % 2 == 1 and t == k // 2 + 1
