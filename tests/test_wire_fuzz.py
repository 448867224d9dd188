"""Fuzzing the wire decoder the server runs on every client message (small budgets: this runs in CI).

tests/test_wire.py fuzzes raw bytes, which mostly die at the header.  Here the fuzzer gets past
it: well-framed messages with random payloads, random header fields, random lengths, and
batches that mix them with honest messages and with objects that are not bytes at all.
The decoder must never raise, must give every rejected message a reason, must judge each
message on its own (a hostile neighbour changes nothing for the others), and whatever it
accepts must decode to a finite vector.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sstq_fl import wire
from sstq_fl.encoders import make_encoder

from .conftest import unit_rows

SPECS = ["sqkr", "vqsgd", "sstq-flat:b=4", "sstq-ma:b=3", "sqkr:coin=public", "clean", "privunit", "privunit-mrc"]
D = 10
T = 5
_ENC: dict[str, object] = {}
# CI's budget; fuzz harder with e.g. SSTQ_FL_FUZZ_EXAMPLES=20000
FUZZ = settings(max_examples=int(os.environ.get("SSTQ_FL_FUZZ_EXAMPLES", 200)), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _enc(spec: str):
    if spec not in _ENC:
        _ENC[spec] = make_encoder(spec, D, 1.0, radius=1.0, seed=3)
    return _ENC[spec]


def _honest(spec: str, n: int, seed: int = 0) -> list[bytes]:
    enc = _enc(spec)
    return wire.pack(enc, enc.encode(unit_rows(n, D, seed=seed).float(), np.arange(n), coins=np.arange(n)), round=T)


def _header(enc, **over: int) -> bytes:
    f = {"magic": wire.MAGIC, "version": wire.VERSION, "flags": 0, "fp": enc.fingerprint, "round": T,
         "bits": enc.payload_bits(), **over}
    return wire.HEADER.pack(f["magic"], f["version"], f["flags"], f["fp"], f["round"], f["bits"])


def _check(spec: str, blobs: list) -> tuple[set[int], dict[str, torch.Tensor]]:
    """Decode a batch; check the invariants; return the rejected indices and the accepted fields."""
    enc = _enc(spec)
    msgs, rejected = wire.unpack_lenient(enc, blobs, round=T)
    bad = {i for i, _ in rejected}
    assert len(bad) == len(rejected) and bad <= set(range(len(blobs)))
    assert msgs.n + len(rejected) == len(blobs)
    assert all(isinstance(why, str) and why for _, why in rejected)
    if msgs.n:
        v = enc.decode(msgs, coins=np.arange(msgs.n))
        assert v.shape == (msgs.n, D) and torch.isfinite(v).all()
    return bad, msgs.fields


@FUZZ
@given(spec=st.sampled_from(SPECS), data=st.data())
def test_well_framed_random_payloads(spec, data):
    enc = _enc(spec)
    nbytes = wire.payload_bytes(enc)
    size = data.draw(st.one_of(st.just(nbytes), st.integers(0, nbytes + 8)), label="payload length")
    body = data.draw(st.binary(min_size=size, max_size=size), label="payload")
    bad, _ = _check(spec, [_header(enc) + body])
    if size != nbytes:
        assert bad == {0}


@FUZZ
@given(spec=st.sampled_from(SPECS), field=st.sampled_from(["magic", "version", "flags", "fp", "round", "bits"]),
       value=st.integers(0, 2**32 - 1))
def test_random_header_fields(spec, field, value):
    enc = _enc(spec)
    good = _honest(spec, 1)[0]
    if field == "magic":
        over: dict[str, object] = {"magic": value.to_bytes(4, "big")[:2]}
    else:
        over = {field: value % (256 if field in ("version", "flags") else 2**32)}
    blob = _header(enc, **over) + good[wire.HEADER_BYTES:]  # type: ignore[arg-type]
    bad, _ = _check(spec, [blob])
    assert bad == (set() if blob == good else {0})


@FUZZ
@given(spec=st.sampled_from(SPECS), data=st.data())
def test_each_message_is_judged_on_its_own(spec, data):
    """A batch with honest messages, hostile ones and non-bytes decodes as its messages one by one."""
    enc = _enc(spec)
    honest = _honest(spec, 3, seed=data.draw(st.integers(0, 50)))
    nbytes = wire.payload_bytes(enc)
    hostile = st.one_of(
        st.binary(max_size=3 * nbytes + 20),
        st.binary(min_size=nbytes, max_size=nbytes).map(lambda b: _header(enc) + b),
        st.sampled_from(honest).map(lambda b: b[:-1]),
        st.sampled_from(honest).map(lambda b: b + b"\x00"),
        st.tuples(st.sampled_from(honest), st.integers(0, 10_000), st.integers(0, 255)).map(
            lambda t: bytes(t[0][: t[1] % len(t[0])]) + bytes([t[2]]) + t[0][t[1] % len(t[0]) + 1 :]),
        st.sampled_from([None, 7, "SQ", [b"SQ"], bytearray(b"SQ\x01"), 3.5]),
    )
    blobs = data.draw(st.lists(st.one_of(st.sampled_from(honest), hostile), min_size=1, max_size=8), label="batch")
    bad, fields = _check(spec, blobs)
    alone = [_check(spec, [b]) for b in blobs]
    assert bad == {i for i, (b, _) in enumerate(alone) if b}
    kept = [f for b, f in alone if not b]
    for name, value in fields.items():
        expect = torch.cat([f[name] for f in kept]) if kept else value[:0]
        assert torch.equal(value, expect.to(value.dtype)), name
    for i, b in enumerate(blobs):
        if isinstance(b, bytes) and b in honest:
            assert i not in bad  # an honest message is never rejected for its neighbours' sake
