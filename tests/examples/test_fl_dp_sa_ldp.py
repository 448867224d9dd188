"""``examples/fl-dp-sa-ldp``: Flower's ``fl-dp-sa`` example (NumPyClient, ``LegacyContext`` +
``DefaultWorkflow``) with the LDP mod and :class:`sstq_fl.flower.LegacyLdpDecoding` adopted.

``ADOPTION.diff`` is the exact difference from the upstream files (it reverse-applies cleanly and gives
back fl-dp-sa's central DP, SecAgg+ and Hub data loading); its LDP part is at most 8 added or edited
lines.  The example's own ServerApp and ClientApp run in-process on a grid that calls the ClientApp
directly (no Ray: the real ``flwr run`` is in the example's README), on random 28×28 images."""

import copy
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from sstq_fl.flower import EmptyRound, LdpDecoding, WrongApi

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "fl-dp-sa-ldp"
DATA_FILES = {"fl_dp_sa/task.py"}  # the offline data loading, counted apart from the LDP lines
MAX_LDP_LINES = 8


def diff_files() -> dict[str, list[str]]:
    """``ADOPTION.diff``'s ``+``/``-`` lines per file (paths as in the example folder)."""
    out: dict[str, list[str]] = {}
    name = ""
    for line in (APP / "ADOPTION.diff").read_text().splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].split("/", 1)[1]
        elif line[:1] in "+-" and not line.startswith("--- "):
            out.setdefault(name, []).append(line)
    return out


def test_the_adoption_diff_is_exact_and_its_ldp_part_is_at_most_8_added_or_edited_lines(tmp_path):
    copy = tmp_path / "app"
    shutil.copytree(APP, copy, ignore=shutil.ignore_patterns("__pycache__", "README.md", "ADOPTION.diff"))
    p = subprocess.run(["patch", "-R", "-p1", "-s", "-f", "-d", str(copy), "-i", str(APP / "ADOPTION.diff")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    upstream = "".join(f.read_text() for f in sorted(copy.glob("**/*.py")))
    assert "DifferentialPrivacyClientSideFixedClipping(" in upstream and "SecAggPlusWorkflow(" in upstream
    assert "secaggplus_mod" in upstream and "flwr_datasets" in upstream and "sstq_fl" not in upstream
    changed = diff_files()
    ldp = [line for f, lines in changed.items() if f not in DATA_FILES | {"pyproject.toml"} for line in lines]
    added = [line for line in ldp if line.startswith("+")]
    assert 0 < len(added) <= MAX_LDP_LINES, "\n".join(added)
    assert any("LdpEncodeMod(" in line for line in added) and any("LegacyLdpDecoding(strategy" in line for line in added)
    assert not any("LdpEncodeMod" in line or "Ldp" in line for line in changed["fl_dp_sa/task.py"])


class LocalGrid:
    """Just enough of Flower's ``Grid`` for ``DefaultWorkflow``: ``nodes`` SuperNodes whose ClientApp runs
    in this process; a ClientApp that raises answers with an error reply, as Flower's runtime does."""

    def __init__(self, app: ClientApp, nodes: int):
        self.app, self.run = app, SimpleNamespace(run_id=1)
        self.contexts = {100 + i: Context(run_id=1, node_id=100 + i, node_config={"partition-id": i, "num-partitions": nodes},
                                          state=RecordDict(), run_config={}) for i in range(nodes)}

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages: Iterable[Message], timeout: float | None = None) -> list[Message]:
        out = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = f"m{len(out)}-{time.monotonic_ns()}"
            try:
                out.append(self.app(copy.deepcopy(m), self.contexts[m.metadata.dst_node_id]))  # as sent: a copy
            except Exception as exc:  # noqa: BLE001 - the runtime's error reply
                out.append(Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=str(exc)), reply_to=m))
        return out


@pytest.fixture
def example(monkeypatch, run_identity):
    """The example's modules, their MNIST replaced by 200 random images (a mechanics test, no data needed)."""
    monkeypatch.syspath_prepend(str(APP))
    from fl_dp_sa import client_app, server_app, task

    g = np.random.default_rng(0)
    monkeypatch.setattr(task, "fds", (g.random((200, 1, 28, 28), dtype=np.float32), g.integers(0, 10, 200)))
    return server_app, client_app, task


def run_example(server_app: Any, client: ClientApp, nodes: int = 5) -> Context:
    """The example's ServerApp (3 rounds, its ``num-sampled-clients`` 20: 4 clients a round) on :class:`LocalGrid`."""
    ctx = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={"num-sampled-clients": 20})
    server_app.app(LocalGrid(client, nodes), ctx)
    return ctx


def test_the_adopted_example_trains_three_rounds_on_ldp_messages(example, monkeypatch):
    server_app, client_app, task = example
    seen: dict[str, Any] = {}
    real = server_app.LegacyLdpDecoding

    def keep(*args: Any, **kwargs: Any) -> Any:
        seen["strategy"] = real(*args, **kwargs)
        return seen["strategy"]

    monkeypatch.setattr(server_app, "LegacyLdpDecoding", keep)
    before = task.get_weights(task.Net())
    t0 = time.monotonic()
    run_example(server_app, client_app.app)
    assert time.monotonic() - t0 < 60
    st = seen["strategy"]
    assert st.last["round"] == 3 and len(st.last["senders"]) == 4 and st.last["dropped"] == []
    assert st.ledger.epsilon(1e-5) == pytest.approx(9.0, rel=1e-3)  # one epsilon = 3 message per round, busiest client
    assert before[0].shape == task.get_weights(task.Net())[0].shape


def test_the_mod_missing_on_the_client_stops_round_one_with_its_cause(example):
    server_app, client_app, _ = example
    plain = ClientApp(client_fn=client_app.client_fn)
    with pytest.raises(EmptyRound, match=r"^no LDP message in any reply of round 1: is LdpEncodeMod in the ClientApp's mods\?$"):
        run_example(server_app, plain)


def test_the_message_api_wrapper_in_the_legacy_example_names_the_legacy_one(example, monkeypatch):
    server_app, client_app, _ = example
    monkeypatch.setattr(server_app, "LegacyLdpDecoding", LdpDecoding)
    with pytest.raises(WrongApi, match=r"use sstq_fl\.flower\.LegacyLdpDecoding: got flwr\.server\.strategy") as err:
        run_example(server_app, client_app.app)
    assert "\n" not in str(err.value)


def test_the_wrapper_missing_stops_the_server_naming_it(example, monkeypatch):
    server_app, client_app, _ = example
    monkeypatch.setattr(server_app, "LegacyLdpDecoding", lambda strategy, **ldp: strategy)
    with pytest.raises(ValueError, match=r"wrap the server's legacy strategy in sstq_fl\.flower\.LegacyLdpDecoding"):
        run_example(server_app, client_app.app)


def test_secagg_kept_on_the_client_is_refused_in_one_line(example):
    server_app, client_app, _ = example
    from flwr.client.mod import secaggplus_mod
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    both = ClientApp(client_fn=client_app.client_fn, mods=[secaggplus_mod, *client_app.app._mods])
    grid, replies = LocalGrid(both, 5), []
    real = grid.send_and_receive

    def record(messages: Iterable[Message], timeout: float | None = None) -> list[Message]:
        replies.extend(out := real(messages, timeout))
        return out

    grid.send_and_receive = record  # type: ignore[method-assign]
    wf = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(num_shares=3, reconstruction_threshold=2))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_app, "DefaultWorkflow", lambda: wf)
        ctx = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={"num-sampled-clients": 20})
        try:
            server_app.app(grid, ctx)
        except Exception:  # noqa: BLE001 - what SecAgg+ does without its clients is Flower's
            pass
    reasons = {r.error.reason for r in replies if r.has_error()}
    assert any(re.match(r"LdpEncodeMod cannot run with SecAgg\+ \(secaggplus_mod / SecAggPlusWorkflow\)", x) for x in reasons)
    assert all("\n" not in x for x in reasons)


def test_the_example_imports_only_the_flower_edge_and_the_data_loader_from_sstq_fl():
    for f in APP.glob("**/*.py"):
        mods = set(re.findall(r"^\s*(?:from|import)\s+(sstq_fl[\w.]*)", f.read_text(), re.M))
        assert mods <= {"sstq_fl.flower", "sstq_fl.data.mnist"}, (f, mods)
    assert sys.modules.get("flwr_datasets") is None
