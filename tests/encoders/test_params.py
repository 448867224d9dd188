import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sstq_fl import wire
from sstq_fl.encoders import make_encoder, parse_spec

from ..conftest import unit_rows

ALL = ["clean", "vqsgd", "sqkr", "privunit", "privunit-mrc", "sstq-flat", "sstq-ma"]


@pytest.mark.parametrize("spec", [s for s in ALL if s != "clean"])
@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_impossible_epsilon(spec, eps):
    with pytest.raises(ValueError, match="epsilon"):
        make_encoder(spec, 10, eps)


@pytest.mark.parametrize("spec", ["sstq-flat:b=0", "sstq-ma:b=17", "sstq-flat:b=2.5"])
def test_impossible_bit_widths(spec):
    with pytest.raises(ValueError, match="b"):
        make_encoder(spec, 10, 1.0)


@pytest.mark.parametrize("spec", ALL)
def test_bad_inputs_name_the_problem(spec):
    enc = make_encoder(spec, 10, 1.0)
    x = unit_rows(3, 10)
    x[1, 4] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or infinite .*rows \[1\]"):
        enc.encode(x, [0, 1, 2])
    with pytest.raises(ValueError, match="d=10"):
        enc.encode(unit_rows(2, 11), [0, 1])
    with pytest.raises(ValueError, match="seeds"):
        enc.encode(unit_rows(2, 10), [0])


def test_bad_specs_and_run_parameters():
    with pytest.raises(ValueError, match="unknown encoder 'nope'"):
        make_encoder("nope", 10, 1.0)
    with pytest.raises(ValueError, match="no parameter"):
        make_encoder("sstq-flat:bits=4", 10, 1.0)
    with pytest.raises(ValueError, match="malformed parameter"):
        make_encoder("sstq-flat:b", 10, 1.0)
    with pytest.raises(ValueError, match="codebook"):
        make_encoder("sstq-flat:codebook=fancy", 10, 1.0)
    with pytest.raises(ValueError, match="dim"):
        make_encoder("sstq-flat", 0, 1.0)
    with pytest.raises(ValueError, match="radius"):
        make_encoder("sstq-flat", 10, 1.0, radius=-1)
    assert parse_spec(" sqkr : k=2 , coin=public ") == ("sqkr", {"k": "2", "coin": "public"})


def test_spec_is_canonical_and_fingerprint_distinguishes_configs():
    a = make_encoder("sstq-flat:codebook=optimized,b=4", 100, 1.0)
    b = make_encoder("sstq-flat:b=4,codebook=optimized", 100, 1.0)
    assert a.spec == b.spec and a.fingerprint == b.fingerprint
    assert a.fingerprint != make_encoder("sstq-flat:b=4,codebook=optimized", 100, 1.0, seed=1).fingerprint


@settings(max_examples=25, deadline=None)
@given(d=st.integers(1, 300), eps=st.floats(0.05, 12.0), b=st.integers(1, 8),
       spec=st.sampled_from(["sstq-flat", "sstq-flat:codebook=optimized", "sstq-ma", "sqkr", "vqsgd"]))
def test_properties_over_d_eps_b(d, eps, b, spec):
    full = f"{spec}{',' if ':' in spec else ':'}b={b}" if spec.startswith("sstq") else spec
    enc = make_encoder(full, d, eps, radius=1.0)
    if spec.startswith("sstq"):
        assert enc.payload_bits() == int(math.log2(enc.N)) + b
    x = unit_rows(4, d, seed=d)
    msgs = enc.encode(x, np.arange(4))
    back = wire.unpack(enc, wire.pack(enc, msgs))
    est = enc.decode(back)
    assert est.shape == (4, d) and torch.isfinite(est).all()
    assert msgs.stats.get("clipped", 0) == 0


@pytest.mark.parametrize("spec", ["sstq-flat:b=4,b=5", "sstq-flat:b=4, b =4", "sqkr:k=2,coin=public,k=3"])
def test_duplicate_spec_keys_are_an_error(spec):
    with pytest.raises(ValueError, match=r"duplicate parameter '(b|k)'"):
        parse_spec(spec)
    with pytest.raises(ValueError, match="duplicate"):
        make_encoder(spec, 10, 1.0)
