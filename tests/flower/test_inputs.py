"""Honest results under every input, on the Flower side: a federation of the wrong size, Flower's
deprecation banner for ``run_simulation``, and Ctrl-C during ``sstq-fl run --engine flower``."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from flwr.app import ConfigRecord, Message, MessageType, Metadata, RecordDict
from flwr.app.message.message import make_message

from sstq_fl.cli import main
from sstq_fl.fl.engine import RunConfig, Trainer
from sstq_fl.flower.discovery import FederationMismatch, discover
from sstq_fl.flower.logs import RUN_SIMULATION_DEPRECATION, without_run_simulation_deprecation
from sstq_fl.flower.stopping import Interrupted, StoppableGrid

from ..test_cli_inputs import run_args


class SizedGrid:
    """Nodes ``1000+i`` answer QUERY messages with partition ``i`` and ``num-partitions`` (as Flower's
    simulation sets them: ``num-supernodes``), or a size of their own (``sizes``)."""

    def __init__(self, nodes: int, sizes: dict[int, int] | None = None, partitions: dict[int, int] | None = None):
        self.ids = [1000 + i for i in range(nodes)]
        self.size = {n: (sizes or {}).get(n, nodes) for n in self.ids}
        self.part = {n: (partitions or {}).get(n, n - 1000) for n in self.ids}
        self.sent: dict[str, int] = {}

    def get_node_ids(self) -> list[int]:
        return list(self.ids)

    def push_messages(self, msgs: list[Message]) -> list[str]:
        for m in msgs:
            mid = f"m{len(self.sent)}"
            m.metadata.__dict__["_message_id"] = mid
            self.sent[mid] = m.metadata.dst_node_id
        return [m.metadata.message_id for m in msgs]

    def pull_messages(self, ids: list[str]) -> list[Message]:
        out = []
        for i in ids:
            node = self.sent[i]
            md = Metadata(run_id=1, message_id="", src_node_id=node, dst_node_id=0, reply_to_message_id=i, group_id="",
                          created_at=time.time(), ttl=60.0, message_type=MessageType.QUERY)
            rec = ConfigRecord({"partition-id": self.part[node], "num-partitions": self.size[node]})
            out.append(make_message(md, RecordDict({"node": rec})))
        return out


@pytest.mark.parametrize("nodes", [2, 6])
def test_a_federation_of_another_size_is_refused_at_once(run_identity, nodes):
    t0 = time.time()
    with pytest.raises(FederationMismatch, match=rf"has {nodes} SuperNodes .* clients=4: run with --federation-config "
                                                 rf"\"num-supernodes=4\" or -c \"clients={nodes}\""):
        discover(SizedGrid(nodes), 4, timeout=60.0)  # type: ignore[arg-type]
    assert time.time() - t0 < 2.0  # was: 120 s waiting for 4 nodes (fewer) or a run on 4 of 6 nodes (more)


def test_one_node_reporting_another_size_refuses_nothing(run_identity):
    """Honest nodes that agree with the run config outvote one that does not (logged, not refused)."""
    grid = SizedGrid(4, sizes={1003: 99})
    assert discover(grid, 4, timeout=5.0) == {0: 1000, 1: 1001, 2: 1002, 3: 1003}  # type: ignore[arg-type]
    assert discover(SizedGrid(4), 4, timeout=5.0) == {i: 1000 + i for i in range(4)}  # type: ignore[arg-type]


def test_a_stoppable_grid_stops_a_round_waiting_for_replies(run_identity):
    """Once stopped, the grid raises from the round's wait (instead of waiting for the round timeout)."""
    stop = threading.Event()
    silent = SizedGrid(2)
    silent.pull_messages = lambda ids: []  # type: ignore[method-assign]
    grid = StoppableGrid(silent, stop)  # type: ignore[arg-type]
    threading.Timer(0.3, stop.set).start()
    t0 = time.time()
    msg = Message(RecordDict({"q": ConfigRecord({})}), dst_node_id=1000, message_type=MessageType.QUERY)
    with pytest.raises(Interrupted):
        grid.send_and_receive([msg], timeout=600.0)
    assert time.time() - t0 < 2.0
    with pytest.raises(Interrupted):
        grid.get_node_ids()


def test_only_the_run_simulation_deprecation_is_silenced(flower_log):
    from flwr.supercore.logger import warn_deprecated_feature

    seen = flower_log
    with without_run_simulation_deprecation():
        warn_deprecated_feature(RUN_SIMULATION_DEPRECATION + " and will be removed in a future version of Flower.")
        warn_deprecated_feature("Something else is deprecated")
        logging.getLogger("flwr").warning("another warning")
    warn_deprecated_feature(RUN_SIMULATION_DEPRECATION + " (outside the context)")
    assert len(seen) == 3 and "Something else" in seen[0] and seen[1] == "another warning"
    assert "outside the context" in seen[2]


def _ray_processes(marker: str) -> str:
    """Ray processes whose command line holds ``marker`` (this test's Ray temporary folder)."""
    out = subprocess.run(["pgrep", "-af", "ray"], capture_output=True, text=True).stdout
    return "\n".join(line for line in out.splitlines() if marker in line)


def _checkpointed_round(out: Path) -> int:
    """The round in ``out``'s checkpoint (-1: none yet; written atomically, so never half a file)."""
    try:
        return int(json.loads((out / "checkpoint.json").read_text())["round"])
    except FileNotFoundError:
        return -1


def test_one_ctrl_c_stops_a_flower_run_promptly(tmp_path):
    """One SIGINT to the process group (as a terminal's Ctrl-C): the run stops within seconds with the
    CLI's one line and no traceback, its checkpoint holds the last completed round, and no Ray process
    is left.  Flower's ``run_simulation`` deprecation banner is not printed either."""
    out = tmp_path / "run"
    ray_tmp = tempfile.mkdtemp(prefix="sstq-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = {**os.environ, "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0", "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1"}
    cli = [sys.executable, "-m", "sstq_fl.cli", "run", "--engine", "flower", "--task", "lsq", "--dim", "20", "--n", "400",
           "--clients", "4", "--batch", "20", "--rounds", "50", "--clip", "1", "--lr", "0.5", "--out", str(out)]
    p = subprocess.Popen(cli, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while _checkpointed_round(out) < 1 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # (round 0 is checkpointed before Flower starts: wait for a completed round)
        time.sleep(1)  # into the rounds
        assert p.poll() is None, p.communicate()[1][-3000:]
        os.killpg(p.pid, signal.SIGINT)
        t0 = time.monotonic()
        stdout, stderr = p.communicate(timeout=90)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert took < 30, f"took {took:.1f} s to stop"
    assert "Traceback" not in stdout + stderr and "DEPRECATED FEATURE" not in stdout + stderr, stderr[-3000:]
    ck = json.loads((out / "checkpoint.json").read_text())
    done = ck["round"]
    assert f"interrupted after round {done}: rerun with --resume" in stderr and 1 <= done < 50
    st = Trainer(RunConfig(**ck["config"])).load(out)  # what --resume starts from: model, rounds and ledger agree
    assert st.round == done and len(st.rounds) == done
    time.sleep(2)
    left = _ray_processes(ray_tmp)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not left, left


def test_a_keyboard_interrupt_from_the_flower_engine_gets_the_same_line(tmp_path, monkeypatch, capsys):
    import sstq_fl.flower.apps.sstq_server as server

    def interrupted(cfg, out, resume=False, progress=None, keep_checkpoints=False, **placement):
        (out / "checkpoint.json").parent.mkdir(parents=True, exist_ok=True)
        (out / "checkpoint.json").write_text(json.dumps({"round": 2}))
        raise KeyboardInterrupt

    monkeypatch.setattr(server, "run_flower", interrupted)
    assert main(run_args(tmp_path / "f", "--engine", "flower")) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted after round 2: rerun with --resume"

