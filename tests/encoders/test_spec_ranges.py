"""Encoder specs with empty items and parameters outside their declared ranges are refused at construction."""

from __future__ import annotations

import pytest

from sstq_fl.encoders.base import make_encoder, parse_spec


@pytest.mark.parametrize("spec", ["sstq-flat:b=4,,", "sstq-flat:", "sstq-flat:,b=4", "sstq-flat:b=", ":b=4"])
def test_empty_parts_refused_naming_the_spec(spec: str) -> None:
    with pytest.raises(ValueError, match="encoder spec"):
        parse_spec(spec)


@pytest.mark.parametrize("spec, why", [
    ("sstq-flat:iters=0", "'iters' must be >= 1"), ("sstq-flat:passes=0", "'passes' must be >= 1"),
    ("sstq-flat:rho=1", "'rho' must be > 1"), ("sstq-flat:rho=nan", "'rho' must be a finite number"),
    ("sstq-flat:level=inf", "'level' must be a finite number"), ("sstq-flat:eta=1", "'eta' must be > 0 and <= 0.999999"),
    ("sstq-flat:delta=0", "'delta' must be > 0"), ("sstq-ma:level=1", "'level' must be > 1"),
    ("sqkr:b0=0", "'b0' must be >= 1"), ("sqkr:k=-1", "'k' must be >= 0"), ("sstq-flat:b=17", "'b' must be >= 1"),
    ("privunit-mrc:bits=0", "'bits' must be >= 1"), ("privunit-mrc:seed_bits=33", "'seed_bits' must be >= 0"),
])
def test_parameter_ranges(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        make_encoder(spec, dim=8, epsilon=1.0)


def test_in_range_accepted() -> None:
    assert make_encoder("sstq-flat:iters=1,passes=1,b=1", dim=8, epsilon=1.0).cfg["iters"] == 1
