import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sstq_fl import wire
from sstq_fl.encoders import WireError, make_encoder

from .conftest import unit_rows

SPECS = ["clean", "vqsgd", "sqkr", "sqkr:coin=public", "privunit", "privunit-mrc", "sstq-flat:b=4",
         "sstq-flat:b=8,codebook=optimized", "sstq-ma:b=3"]
D = 25450


@pytest.fixture(scope="module")
def encoded():
    x = unit_rows(6, D, seed=1).float()
    out = {}
    for spec in SPECS:
        enc = make_encoder(spec, D, 3.0, radius=1.0)
        msgs = enc.encode(x, np.arange(6), coins=np.arange(6))
        out[spec] = (enc, msgs, wire.pack(enc, msgs, round=7))
    return out


@pytest.mark.parametrize("spec", SPECS)
def test_round_trip_and_exact_payload_bits(encoded, spec):
    enc, msgs, blobs = encoded[spec]
    expected = {"clean": 32 * D, "privunit": 32 * D, "privunit-mrc": 32, "vqsgd": 16, "sqkr": 68, "sqkr:coin=public": 4,
                "sstq-flat:b=4": 20, "sstq-flat:b=8,codebook=optimized": 24, "sstq-ma:b=3": 19}[spec]
    assert enc.payload_bits() == expected
    for blob in blobs:
        body = blob[wire.HEADER_BYTES :]
        assert len(body) == (expected + 7) // 8  # only the last byte is padded
        bits = np.unpackbits(np.frombuffer(body, np.uint8))
        assert not bits[expected:].any()
        assert struct.unpack(">I", blob[12:16])[0] == expected
    back = wire.unpack(enc, blobs, round=7)
    for k, v in msgs.fields.items():
        assert torch.equal(back.fields[k].to(v.dtype), v.cpu()), k
    assert torch.allclose(enc.decode(back, coins=np.arange(6)), enc.decode(msgs, coins=np.arange(6)))


def test_malformed_messages_are_rejected_with_reasons(encoded):
    enc, _, blobs = encoded["sstq-flat:b=4"]
    good = blobs[0]
    cases = {
        "truncated": good[:-1],
        "oversized": good + b"\x00",
        "header": good[:10],
        "bad magic": b"XX" + good[2:],
        "version": good[:2] + b"\x09" + good[3:],
        "flags": good[:3] + b"\x01" + good[4:],
        "foreign": wire.pack(make_encoder("sstq-flat:b=4", D, 2.0), make_encoder("sstq-flat:b=4", D, 2.0).encode(
            unit_rows(1, D).float(), [0]), round=7)[0],
        "round": wire.pack(enc, enc.encode(unit_rows(1, D).float(), [0]), round=8)[0],
        "declares": good[:12] + struct.pack(">I", 21) + good[16:],
        "padding": good[:-1] + bytes([good[-1] | 1]),
    }
    for name, blob in cases.items():
        with pytest.raises(WireError) as err:
            wire.unpack(enc, [blob], round=7)
        assert name.split()[0] in str(err.value).lower() or name == "header", (name, str(err.value))
    msgs, rejected = wire.unpack_lenient(enc, [good, cases["truncated"], blobs[1]], round=7)
    assert msgs.n == 2 and [i for i, _ in rejected] == [1]


def test_out_of_range_fields_are_rejected():
    enc = make_encoder("vqsgd", 5, 1.0)  # 2d = 10 vertices in 4 bits: 10..15 are invalid
    blob = bytearray(wire.pack(enc, enc.encode(unit_rows(1, 5), [0]))[0])
    blob[16] = 0b1111_0000
    with pytest.raises(WireError, match="out of range"):
        wire.unpack(enc, [bytes(blob)])
    sq = make_encoder("sqkr:k=2", 5, 1.0)
    m = sq.encode(unit_rows(1, 5), [0])
    m.fields["idx"][0, 1] = m.fields["idx"][0, 0]
    with pytest.raises(WireError, match="repeats"):
        wire.unpack(sq, wire.pack(sq, m))


def test_float_payloads_validated():
    for spec in ["clean", "privunit"]:
        enc = make_encoder(spec, 8, 1.0)
        blob = bytearray(wire.pack(enc, enc.encode(unit_rows(1, 8), [0]))[0])
        blob[16:20] = np.float32(np.nan).tobytes()
        with pytest.raises(WireError, match="NaN"):
            wire.unpack(enc, [bytes(blob)])
        blob[16:20] = np.float32(1e6).tobytes()
        with pytest.raises(WireError, match="norm"):
            wire.unpack(enc, [bytes(blob)])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=40), st.sampled_from(["sstq-flat:b=4", "vqsgd", "sqkr", "clean"]))
def test_fuzzed_bytes_never_crash_the_decoder(data, spec):
    enc = _small(spec)
    try:
        msgs = wire.unpack(enc, [data])
    except WireError:
        return
    assert msgs.n == 1  # only a structurally valid message gets here; it must decode
    assert torch.isfinite(enc.decode(msgs, coins=[0])).all()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 20), st.integers(0, 255))
def test_fuzzed_mutations_of_valid_messages(seed, pos, byte):
    enc = _small("sstq-flat:b=4")
    blob = bytearray(wire.pack(enc, enc.encode(unit_rows(1, 10, seed=seed % 100), [seed]))[0])
    if pos < len(blob):
        blob[pos] = byte
    try:
        msgs = wire.unpack(enc, [bytes(blob)])
    except WireError:
        return
    assert torch.isfinite(enc.decode(msgs)).all()


_CACHE: dict[str, object] = {}


def _small(spec):
    if spec not in _CACHE:
        _CACHE[spec] = make_encoder(spec, 10, 1.0)
    return _CACHE[spec]
