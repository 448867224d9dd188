"""Fuzzing ``privacy replay`` (as tests/test_wire_fuzz.py fuzzes the wire decoder; small budgets: CI).

The fuzzer starts from valid transcripts of the ledger's typical runs (an LDP training run with
a plan, a DP-MEPF-like run with public and Gaussian events, a DP-SGD run with composed events, a
non-private run) and mutates them: lines dropped, duplicated, swapped or cut off; fields set to
hostile values (negative, fractional, huge, bool, string, non-finite counts and parameters) or to
random JSON; keys added and removed; events nested deep; lines replaced by random JSON; bytes cut
or corrupted.  A second test feeds lines of arbitrary JSON.

Invariants: :meth:`PrivacyLedger.from_transcript` either raises :class:`TranscriptError` with a
one-line message, or returns a ledger whose ε at the summary's δ is a number in ``[0, ∞]`` (and
:func:`replay` then answers too); nothing else ever escapes.  The CLI exits 2 with exactly one
``sstq-fl: error:`` line on stderr when the library refuses, and 0 or 1 with nothing on stderr
otherwise.  Every unmutated transcript replays and matches its summary.

The PLD size limit is lowered to 2^16 points here, and the transcripts use a 1e-2 grid, so that
every accepted example is accounted in milliseconds (the refusal path is the same code).
Budget: 400 + 266 examples by default (about 10 s on 2 cores); fuzz harder with e.g.
``SSTQ_FL_FUZZ_EXAMPLES=5000``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sstq_fl.cli import main
from sstq_fl.privacy import pld as pld_module
from sstq_fl.privacy.errors import Budget, TranscriptError
from sstq_fl.privacy.events import (
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PublicDataEvent,
    PureDpEvent,
    SelfComposedEvent,
)
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.replay import replay

from .test_replay import nested_event, rechained

N = int(os.environ.get("SSTQ_FL_FUZZ_EXAMPLES", 400))
FUZZ = settings(max_examples=N, deadline=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
GRID = 1e-2
Lines = list[Any]


def _lines(led: PrivacyLedger) -> Lines:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.jsonl"
        led.write_transcript(path, delta=1e-5)
        return [json.loads(s) for s in path.read_text().splitlines()]


def _ldp_run() -> PrivacyLedger:
    led = PrivacyLedger(discretization=GRID, notes={"run_id": "fuzz-ldp", "encoder": "sstq-flat:b=4"})
    led.start([(PureDpEvent(0.5), 20)], Budget(50.0, 1e-5))
    led.record(PureDpEvent(0.5), 12)
    led.mark_complete()
    return led


def _mepf_run() -> PrivacyLedger:
    led = PrivacyLedger(discretization=GRID, notes={"run_id": "fuzz-mepf", "data": {"records": 10}})
    led.record(PublicDataEvent(), subset="public", note="phi: public features")
    led.record(GaussianEvent(3.0), meta={"stage": "labelled-release", "q": None, "client_ids": [0, 1]})
    return led


def _sgd_run() -> PrivacyLedger:
    step = PoissonSampledEvent(0.1, GaussianEvent(2.0))
    extra = ComposedEvent((LaplaceEvent(4.0), SelfComposedEvent(PureDpEvent(0.2, "add_or_remove_one"), 3)))
    led = PrivacyLedger("add_or_remove_one", GRID)
    led.start([(step, 50), (extra, 1)])
    led.record(step, 20, subset="private-train")
    led.record(extra, note="tuning")
    led.record(step, 5, subset="private-train")
    return led


def _clean_run() -> PrivacyLedger:
    led = PrivacyLedger(discretization=GRID, notes={"run_id": "fuzz-clean"})
    led.start([(NonPrivateEvent(), 3)])
    led.record(NonPrivateEvent(), 3)
    led.mark_complete()
    return led


VALID: list[Lines] = [_lines(f()) for f in (_ldp_run, _mepf_run, _sgd_run, _clean_run)]
HOSTILE: list[Any] = [-1, 0, 1, 2.5, -0.0, 10**7 + 1, 10**12, 10**400, True, False, None, "3", "", [], {}, math.inf,
                      -math.inf, math.nan, 1e-300, 5e-324, 1e308, 0.5, "replace_one", "summary",
                      {"kind": "public", "description": ""}, [{"kind": "pure_dp"}]]
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
                    max_leaves=10)


def _encode(lines: Lines) -> bytes:
    """The lines, hash-chained again (as a writer of every line would), so a mutation reaches the checks past the
    chain's (a broken chain: tests/privacy/test_chain.py)."""
    return rechained(lines).encode() if lines else b""


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into ``obj`` (dict keys and list indices)."""
    out: list[tuple[Any, ...]] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for k, v in items:
        out.append((*prefix, k))
        out.extend(_paths(v, (*prefix, k)))
    return out


def _parent(root: Any, path: tuple[Any, ...]) -> Any:
    for k in path[:-1]:
        root = root[k]
    return root


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """A valid transcript with 1-3 structural or value mutations, then possibly a byte-level one."""
    lines = copy.deepcopy(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 3))):
        _mutate(draw, lines)
    blob = _encode(lines)
    op = draw(st.sampled_from(["none", "none", "cut", "flip", "append"]))
    if op == "cut":
        return blob[: draw(st.integers(0, len(blob)))]
    if op == "flip" and blob:
        i = draw(st.integers(0, len(blob) - 1))
        return blob[:i] + bytes([draw(st.integers(0, 255))]) + blob[i + 1:]
    if op == "append":
        return blob + draw(st.binary(max_size=12))
    return blob


def _mutate(draw: st.DrawFn, lines: Lines) -> None:
    op = draw(st.sampled_from(["drop", "dup", "swap", "set", "set", "set", "delete", "add", "nest", "replace", "insert"]))
    if not lines:
        lines.append(draw(JSON))
        return
    i = draw(st.integers(0, len(lines) - 1))
    paths = _paths(lines[i])
    if op == "drop":
        del lines[i]
    elif op == "dup":
        lines.insert(draw(st.integers(0, len(lines))), copy.deepcopy(lines[i]))
    elif op == "swap":
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    elif op in ("set", "delete", "add") and paths:
        path = draw(st.sampled_from(paths))
        parent = _parent(lines[i], path)
        value = copy.deepcopy(draw(st.one_of(st.sampled_from(HOSTILE), JSON)))  # HOSTILE holds mutable values
        if op == "set":
            parent[path[-1]] = value
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=6))] = value
    elif op == "nest" and isinstance(lines[i], dict):
        lines[i]["event"] = nested_event(draw(st.integers(1, 80)))
    elif op == "replace":
        lines[i] = draw(st.one_of(JSON, st.just(json.loads("[" * 600 + "]" * 600))))
    elif op == "insert":
        lines.insert(i, draw(JSON))


def _check(blob: bytes, path: Path) -> bool:
    """The invariants above; returns whether the transcript was accepted."""
    path.write_bytes(blob)
    try:
        led, summary = PrivacyLedger.from_transcript(path)
    except TranscriptError as exc:
        accepted, msg = False, str(exc)
        assert msg and "\n" not in msg and "\r" not in msg
    else:
        accepted = True
        eps = led.epsilon(summary["delta"])
        assert isinstance(eps, float) and eps >= 0 and not math.isnan(eps)
        assert replay(path)["epsilon"] == eps
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(["privacy", "replay", str(path)])
    if accepted:
        assert rc in (0, 1) and err.getvalue() == "" and out.getvalue().count("\n") == 1
    else:
        assert rc == 2 and err.getvalue().startswith("sstq-fl: error: ") and err.getvalue().count("\n") == 1
    return accepted


@pytest.fixture
def small_plds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pld_module, "MAX_PLD_POINTS", 2**16)


def _bug(fn: Callable[[Lines], Any], base: int = 0) -> bytes:
    """The LDP transcript (or another valid one) after ``fn``: the explicit examples below."""
    lines = copy.deepcopy(VALID[base])
    fn(lines)
    return _encode(lines)


BUGS: dict[str, bytes] = {
    "negative count": _bug(lambda ls: ls[1].update(count=-70)),
    "zero count": _bug(lambda ls: ls[1].update(count=0)),
    "fractional count": _bug(lambda ls: ls[1].update(count=2.5)),
    "bool count": _bug(lambda ls: ls[1].update(count=True)),
    "huge count": _bug(lambda ls: ls[1].update(count=10**12)),
    "huge gaussian count": _bug(lambda ls: ls[2].update(count=10**6), base=1),
    "unknown field in a line": _bug(lambda ls: ls[1].update(extra=1)),
    "missing field in a line": _bug(lambda ls: ls[1].pop("note")),
    "unknown key in an event": _bug(lambda ls: ls[1]["event"].update(bogus=1)),
    "missing key in an event": _bug(lambda ls: ls[1]["event"].pop("relation")),
    "non-numeric parameter": _bug(lambda ls: ls[1]["event"].update(epsilon="0.5")),
    "non-finite parameter": _bug(lambda ls: ls[1]["event"].update(epsilon=math.inf)),
    "huge integer parameter": _bug(lambda ls: ls[1]["event"].update(epsilon=10**400)),
    "bool parameter": _bug(lambda ls: ls[1]["event"].update(epsilon=True)),
    "tiny gaussian noise": _bug(lambda ls: ls[2]["event"].update(noise_multiplier=1e-300), base=1),
    "events beyond the plan": _bug(lambda ls: ls[1].update(count=21)),
    "missing summary": _bug(lambda ls: ls.pop()),
    "summary not last": _bug(lambda ls: ls.append(copy.deepcopy(ls[1]))),
    "summary twice": _bug(lambda ls: ls.append(copy.deepcopy(ls[-1]))),
    "a line that is a list": _bug(lambda ls: ls.insert(1, [])),
    "a line that is a string": _bug(lambda ls: ls.insert(1, "event")),
    "a line that is a number": _bug(lambda ls: ls.insert(1, 3)),
    "deeply nested event": _bug(lambda ls: ls[1].update(event=nested_event(400))),
    "string discretization": _bug(lambda ls: ls[0].update(discretization="x")),
    "invalid JSON": b'{"type": "header", "format": "sstq-fl-privacy-transcript"\n',
    "non-UTF-8": _encode(VALID[0])[:40] + b"\xff\xfe" + _encode(VALID[0])[42:],
    "empty file": b"",
    "not a transcript": b'{"epsilon": 1.0, "rounds": []}\n',
    "deep JSON nesting": b"[" * 50_000 + b"]" * 50_000 + b"\n",
}


def _with_examples(fn: Callable[..., None]) -> Callable[..., None]:
    for blob in BUGS.values():
        fn = example(blob=blob)(fn)
    return fn


@FUZZ
@_with_examples
@given(blob=_mutated())
def test_mutated_transcripts_are_replayed_or_refused_in_one_line(small_plds, tmp_path, blob):
    _check(blob, tmp_path / "t.jsonl")


@settings(FUZZ, max_examples=max(1, 2 * N // 3))
@given(first=st.one_of(st.sampled_from([v[0] for v in VALID]), JSON), rest=st.lists(JSON, max_size=4),
       summary=st.booleans())
def test_arbitrary_json_lines_are_refused_in_one_line(small_plds, tmp_path, first, rest, summary):
    lines = [first, *rest, *([VALID[0][-1]] if summary else [])]
    assert not _check(_encode(lines), tmp_path / "t.jsonl")


@pytest.mark.parametrize("i", range(len(VALID)))
def test_unmutated_transcripts_replay_and_match(tmp_path, i):
    assert _check(_encode(VALID[i]), tmp_path / "t.jsonl")
    assert replay(tmp_path / "t.jsonl")["matches_recorded"]


def test_every_listed_bug_is_refused(small_plds, tmp_path):
    for name, blob in BUGS.items():
        assert not _check(blob, tmp_path / "t.jsonl"), name
