"""The clients' own ledgers in a Flower simulation: the server's charges bound them (each sampled client is
charged before its message leaves), and a client past its budget refuses and is recorded as a dropout with
its reason."""

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from sstq_fl.fl.engine import RunConfig, run  # noqa: E402
from sstq_fl.fl.round_draws import participates  # noqa: E402
from sstq_fl.flower.client_ledger import BUDGET_SPENT, LEDGER_DIR_ENV, ClientLedger  # noqa: E402
from sstq_fl.privacy.pure_composition import pure_composition_epsilon  # noqa: E402

DELTA = 1e-5
CFG = dict(task="lsq", dim=20, n=400, clients=4, batch=20, clip=1.0, lr=0.5, rounds=4, encoder="sstq-flat:b=4",
           engine="flower", sampling_rate=0.75, seed=0, delta=DELTA, epsilon=3.0)  # seed 0: clients sampled 3, 1, 3, 4 times


def client_ledgers(folder: Path) -> dict[int, ClientLedger]:
    """The clients' ledger files (``$SSTQ_FL_LEDGER_DIR``), by client."""
    out = {}
    for p in folder.glob("client-ledger-*.json"):
        c = int(p.stem.rsplit("-", 1)[1])
        out[c] = ClientLedger.from_json(json.loads(p.read_text()), c)
    return out


@pytest.mark.parametrize("per_node", [1, pytest.param(2, marks=pytest.mark.slow)])  # 2: 46 s more on 2 cores
def test_client_ledgers_agree_with_the_server_and_a_spent_client_is_left_out(tmp_path, monkeypatch, per_node):
    """Reproducible coins; ``client-budget-epsilon`` = ε of 3 messages: client 3's fourth sampling is refused."""
    monkeypatch.setenv(LEDGER_DIR_ENV, str(tmp_path / "ledgers"))
    three = pure_composition_epsilon(3.0, 3, DELTA)
    res = run(RunConfig(client_budget_epsilon=three, clients_per_node=per_node, **CFG), tmp_path / "run", progress=False)
    sampled = np.array([participates(0, t, 4, 0.75) for t in range(1, 5)])
    led = client_ledgers(tmp_path / "ledgers")
    assert {c: led[c].messages for c in led} == {0: 3, 1: 1, 2: 3, 3: 3}
    for lc in led.values():
        assert lc.report(DELTA)["epsilon"] == pytest.approx(pure_composition_epsilon(3.0, lc.messages, DELTA), rel=1e-12)
    # the server charges each sampled client before its message leaves: client 3's refused fourth message too
    assert res["final"]["epsilon_total"] == pytest.approx(pure_composition_epsilon(3.0, 4, DELTA), rel=1e-12)
    assert res["final"]["epsilon_total"] > max(lc.report(DELTA)["epsilon"] for lc in led.values())
    last = int(np.nonzero(sampled[:, 3])[0][-1])  # the round of client 3's fourth sampling
    dropped = [d for r in res["rounds"] for d in r["dropped"]]
    assert [d["client"] for d in dropped] == [3] and BUDGET_SPENT in dropped[0]["reason"]
    assert res["rounds"][last]["dropped"] == dropped
