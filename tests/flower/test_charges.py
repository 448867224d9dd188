"""The Flower server charges round ``t``, and writes the transcript, before its train messages leave: a message
sent is always charged, and a resumed run keeps the charges written after its checkpoint."""

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from flwr.app import MessageType  # noqa: E402

from sstq_fl.cli import main  # noqa: E402
from sstq_fl.fl.engine import RunConfig, run  # noqa: E402
from sstq_fl.flower.stopping import Interrupted, StoppableGrid  # noqa: E402
from sstq_fl.privacy.ledger import PrivacyLedger  # noqa: E402

CFG = dict(task="lsq", dim=20, n=300, clients=3, batch=20, clip=1.0, lr=0.5, rounds=2, encoder="sstq-flat:b=4",
           engine="flower")
SEND = StoppableGrid.send_and_receive


def spy_sends(monkeypatch: pytest.MonkeyPatch, out: Path, stop_at: int | None) -> list[tuple[int, list[Any]]]:
    """Each train send's round and the rounds the transcript charges at that moment; the send of round
    ``stop_at`` is abandoned after it is read (the server stopped while the messages leave)."""
    seen: list[tuple[int, list[Any]]] = []

    def spied(self: StoppableGrid, messages: Any, *, timeout: float | None = None) -> Any:
        messages = list(messages)
        train = [m for m in messages if m.metadata.message_type == MessageType.TRAIN]
        if train:
            led, _ = PrivacyLedger.from_transcript(out / "transcript.jsonl")
            seen.append((int(train[0].metadata.group_id), [e.meta.get("round") for e in led.entries]))
            if seen[-1][0] == stop_at:
                raise Interrupted("stopped by the test while round messages leave")
        return SEND(self, messages, timeout=timeout)

    monkeypatch.setattr(StoppableGrid, "send_and_receive", spied)
    return seen


def test_each_round_is_charged_before_its_train_messages_leave_and_resume_keeps_it(tmp_path, monkeypatch):
    """Round 2's messages leave, then the server stops: the transcript already charges round 2 (main: round
    ``t``'s charge was written after its replies).  The resumed run keeps that charge and sends round 2
    again (reproducible mode: the same messages, not charged twice), ε as the uninterrupted run's."""
    out = tmp_path / "f"
    seen = spy_sends(monkeypatch, out, stop_at=2)
    with pytest.raises((RuntimeError, Interrupted)):
        run(RunConfig(**CFG), out, progress=False)  # type: ignore[arg-type]
    assert seen == [(1, [1]), (2, [1, 2])]
    seen = spy_sends(monkeypatch, out, stop_at=None)
    got = run(RunConfig(**CFG), out, resume=True, progress=False)  # type: ignore[arg-type]
    assert seen == [(2, [1, 2])]
    led, _ = PrivacyLedger.from_transcript(out / "transcript.jsonl")
    assert [e.meta["round"] for e in led.entries] == [1, 2]
    ref = run(RunConfig(**{**CFG, "engine": "vectorized"}), tmp_path / "v", progress=False)  # type: ignore[arg-type]
    assert [r["epsilon_spent"] for r in got["rounds"]] == [r["epsilon_spent"] for r in ref["rounds"]]
    assert main(["privacy", "replay", str(out / "transcript.jsonl"), "--metrics", str(out / "metrics.json")]) == 0

