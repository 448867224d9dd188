"""The Kashin encoders' shared machinery (:mod:`sstq_fl.encoders.framed`): projecting onto the ball by scaling
the coefficients gives the coefficients, and the messages, of the projected input."""

import numpy as np
import pytest
import torch

from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.base import clip_to_ball
from sstq_fl.encoders.maths.kashin import kashin

from ..conftest import unit_rows


def rows_around_the_ball(d: int, radius: float) -> torch.Tensor:
    """Rows far outside, just outside, inside and at the centre of the ball."""
    u = unit_rows(6, d, seed=5)
    return torch.cat([u[:2] * 40 * radius, u[2:3] * 1.0001 * radius, u[3:5] * 0.3 * radius, torch.zeros(1, d)])


@pytest.mark.parametrize("spec", ["sstq-flat:b=4", "sqkr:b0=3"])
def test_coefficients_of_the_input_are_those_of_its_projection(spec):
    enc = make_encoder(spec, 300, 2.0, radius=0.5)
    x = rows_around_the_ball(300, 0.5)
    idx = torch.randint(0, enc.N, (x.shape[0], 3), generator=torch.Generator().manual_seed(1))
    got, _ = enc.coefficients(x, idx)
    want = kashin(enc.frame, clip_to_ball(x, 0.5), enc.kashin_cfg, idx).coeffs.clamp(-enc.bound, enc.bound)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("spec", ["sstq-flat:b=4", "sstq-ma:b=4", "sqkr:b0=3"])
def test_messages_of_the_input_are_those_of_its_projection(spec):
    enc = make_encoder(spec, 300, 2.0, radius=0.5)
    x = rows_around_the_ball(300, 0.5)
    seeds = np.arange(x.shape[0], dtype=np.uint64) + 11
    a, b = enc.encode(x, seeds), enc.encode(clip_to_ball(x, 0.5), seeds)
    assert a.fields.keys() == b.fields.keys()
    assert all(torch.equal(a.fields[k], b.fields[k]) for k in a.fields)
