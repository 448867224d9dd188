"""Resume rebuilds every ε from the hash chain (issue 44, part 2).

Before: a checkpoint edit alone lowered the published ε: a header-only transcript prefix with every round's
``epsilon_spent`` at 0 gave ε 0 (true 9), in secure mode 3 of 9 from a round-2 checkpoint; a checkpoint rolled
back one round re-sent that round uncharged (4 messages sent, 3 charged; now 2 sent, 2 charged: the resume is
refused in one ``--resume:`` line, its re-sent round would take the run past its plan); a shuffler run's central ledger was
rebuilt from the checkpoint's ``messages_central`` (×1000 lowered the central ε).  Now the checkpoint keeps no
ε, the prefix must charge exactly its rounds, each round is charged before its messages leave, and the
ledgers are the replay of the whole transcripts.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sstq_fl.cli import main
from sstq_fl.fl.engine import ClientData, RunConfig, Trainer, run
from sstq_fl.fl.resume import ACCOUNTING
from sstq_fl.privacy.errors import PlanExceededError
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.transcript import line_hash
from tests.fl.test_resume_transcript import CFG, FLAGS, edit_checkpoint, stopped_after


def header_only(ck: dict[str, Any], out: Path) -> dict[str, Any]:
    """The checkpoint with its prefix the transcript's header line and every round's ε 0 (the attack)."""
    first = (out / "transcript.jsonl").read_text().splitlines()[0]
    return {**ck, "transcript": {"lines": 1, "sha256": line_hash(first)},
            "rounds": [{**r, "epsilon_spent": 0.0} for r in ck["rounds"]]}


def test_a_header_only_prefix_of_a_finished_kept_run_is_refused(tmp_path):
    """(a) reproducible, a finished run whose checkpoint was kept: main published ε 0; now refused."""
    out = tmp_path / "k"
    ref = run(RunConfig(**CFG), out, progress=False, keep_checkpoints=True)  # type: ignore[arg-type]
    assert ref["final"]["epsilon_total"] == pytest.approx(9.0, abs=1e-3)
    edit_checkpoint(out, lambda ck: header_only(ck, out))
    with pytest.raises(ValueError, match=r"^--resume: .*prefix charges 0 message\(s\).*not the 3 its 3 rounds sent"):
        run(RunConfig(**CFG), out, resume=True, progress=False)  # type: ignore[arg-type]


def test_a_header_only_prefix_of_a_secure_round_2_checkpoint_is_refused(tmp_path):
    """(b) secure, stopped after round 2: main gave ε 3 of 9; now refused in one line."""
    out = stopped_after(tmp_path / "k", after=2, randomness="secure")
    edit_checkpoint(out, lambda ck: header_only(ck, out))
    with pytest.raises(ValueError, match=r"^--resume: .*prefix charges rounds \[\]") as exc:
        run(RunConfig(**CFG, randomness="secure"), out, resume=True, progress=False)  # type: ignore[arg-type]
    assert "\n" not in str(exc.value)


def spy_messages(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """Every client's wire messages produced from now on (warm-up off: it produces one, never sent)."""
    sent: dict[int, int] = {}
    real = ClientData.messages

    def counted(self: ClientData, enc: Any, theta: Any, t: int, ids: np.ndarray) -> Any:
        for c in ids:
            sent[int(c)] = sent.get(int(c), 0) + 1
        return real(self, enc, theta, t, ids)

    monkeypatch.setattr(ClientData, "messages", counted)
    monkeypatch.setattr(Trainer, "warm_up", lambda self, st: 0.0)
    return sent


def rolled_back(tmp_path: Path) -> Path:
    """A secure run's round-1 checkpoint restored after round 2 ran (its charge in the transcript): resuming
    re-sends round 2 with fresh coins, charged again, so round 3 would be the busiest client's 4th of 3."""
    out = stopped_after(tmp_path / "k", after=1, randomness="secure")
    saved = tmp_path / "r1"
    saved.mkdir()
    for p in [out / "checkpoint.json", *out.glob("checkpoint_theta-*.npy")]:
        shutil.copy(p, saved / p.name)
    tr = Trainer(RunConfig(**CFG, randomness="secure"))  # type: ignore[arg-type]
    real = tr.run_round
    tr.run_round = lambda st: (_ for _ in ()).throw(KeyboardInterrupt) if st.round == 2 else real(st)  # type: ignore
    with pytest.raises(KeyboardInterrupt):
        tr.train(out, resume=True, progress=False)
    for p in out.glob("checkpoint_theta-*.npy"):
        p.unlink()
    for p in saved.iterdir():
        shutil.copy(p, out / p.name)
    return out


PAST_PLAN = (r"^--resume: round 3 would charge message 4 of the planned 3: .*transcript.jsonl charges 2 for the "
             r"checkpoint's 1 rounds \(a round sent after it is charged again when re-sent\)$")


def test_a_rolled_back_secure_checkpoint_charges_every_message_sent(tmp_path, monkeypatch):
    """(c) every message sent is charged (main: 4 sent, 3 charged), and a resume whose re-sent round would take
    the run past its plan is refused in one line before it encodes anything (was: a raw PlanExceededError
    at round 3, after round 2 was sent again)."""
    sent = spy_messages(monkeypatch)
    out = rolled_back(tmp_path)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ValueError, match=PAST_PLAN) as exc:
        run(RunConfig(**CFG, randomness="secure"), out, resume=True, progress=False)  # type: ignore[arg-type]
    assert not isinstance(exc.value, PlanExceededError) and "\n" not in str(exc.value)
    led, _ = PrivacyLedger.from_transcript(out / "transcript.jsonl")
    assert max(sent.values()) == 2 and sum(e.count for e in led.entries) == 2
    assert [e.meta["round"] for e in led.entries] == [1, 2]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_the_cli_refuses_a_resume_past_the_plan_in_one_line(tmp_path, monkeypatch, capsys):
    """``sstq-fl run ... --resume`` of the rolled-back secure checkpoint: exit 2, the one ``--resume:`` line."""
    sent = spy_messages(monkeypatch)
    out = rolled_back(tmp_path)
    capsys.readouterr()
    assert main(["run", *FLAGS, "--randomness", "secure", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "PlanExceededError" not in err
    assert re.search(PAST_PLAN[1:-1], err) and max(sent.values()) == 2


def test_an_edited_messages_central_does_not_change_the_central_epsilon(tmp_path):
    """(d) shuffler: ``messages_central`` ×1000 in the checkpoint (main: central ε far below the true one) is
    ignored; the central ledger is the replay of transcript_central.jsonl."""
    cfg = RunConfig(**CFG, trust="shuffler")  # type: ignore[arg-type]
    ref = run(cfg, tmp_path / "ref", progress=False)
    out = stopped_after(tmp_path / "k", after=2, trust="shuffler")
    edit_checkpoint(out, lambda ck: {**ck, "rounds": [{**r, "messages_central": 1000 * r["clients"]}
                                                      for r in ck["rounds"]]})
    got = run(cfg, out, resume=True, progress=False)
    assert got["final"]["epsilon_central"]["epsilon"] == ref["final"]["epsilon_central"]["epsilon"]
    for key in ACCOUNTING:
        assert [r[key] for r in got["rounds"]] == [r[key] for r in ref["rounds"]]


def test_a_checkpoint_holds_no_accounting_figures(tmp_path):
    out = stopped_after(tmp_path / "k", after=2, trust="shuffler")
    ck = json.loads((out / "checkpoint.json").read_text())
    assert ck["rounds"] and not any(k in r for r in ck["rounds"] for k in ACCOUNTING)
    assert (out / "transcript_central.jsonl").exists()


@pytest.mark.parametrize("trust", ["server", "shuffler"])
def test_a_reproducible_resume_gives_the_uninterrupted_metrics(tmp_path, trust):
    cfg = RunConfig(**CFG, trust=trust)  # type: ignore[arg-type]
    ref = run(cfg, tmp_path / "ref", progress=False)
    out = stopped_after(tmp_path / "k", after=1, trust=trust)
    got = run(cfg, out, resume=True, progress=False)
    assert [set(r) for r in got["rounds"]] == [set(r) for r in ref["rounds"]]
    for a, b in zip(got["rounds"], ref["rounds"], strict=True):
        assert {k: a[k] for k in ACCOUNTING if k in a} == {k: b[k] for k in ACCOUNTING if k in b}
        assert a["dropped"] == b["dropped"]
        assert {k: v for k, v in a.items() if k not in (*ACCOUNTING, "dropped")} == pytest.approx(
            {k: v for k, v in b.items() if k not in (*ACCOUNTING, "dropped")}, rel=1e-9)
    assert got["final"]["epsilon_total"] == ref["final"]["epsilon_total"]
    assert main(["privacy", "replay", str(out / "transcript.jsonl"), "--metrics", str(out / "metrics.json")]) == 0
