"""Frames drawn afresh each round (``draw=round``), ``guarantee=whp`` and the short secure schedule.

The attack: inputs tuned to one fixed frame (its rows, its Walsh flats) need a level far above the public one
there and are clipped (biased) with ``draw=fixed``; on the rounds' fresh frames they are ordinary inputs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sstq_fl import rng, wire
from sstq_fl.bench.frame_round import upper95
from sstq_fl.bench.kashin import flat_vector, walsh_flats
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.framed import FramedEncoder, round_frame_seed, whp_level
from sstq_fl.encoders.maths.kashin import kashin


def _framed(spec: str, d: int, seed: int = 0) -> FramedEncoder:
    enc = make_encoder(spec, d, 3.0, seed=seed)
    assert isinstance(enc, FramedEncoder)
    return enc


def test_each_round_has_its_own_public_frame_and_fingerprint():
    enc = _framed("sstq-flat:b=4", 100)
    r1, r1b, r2 = enc.for_round(1), enc.for_round(1), enc.for_round(2)
    assert r1.frame.seed == r1b.frame.seed == round_frame_seed(0, 1) != r2.frame.seed != enc.frame.seed
    assert len({enc.fingerprint, r1.fingerprint, r2.fingerprint}) == 3 and r1.fingerprint == r1b.fingerprint
    assert not torch.equal(r1.frame.rows(torch.arange(4)), r2.frame.rows(torch.arange(4)))
    fixed = _framed("sstq-flat:b=4,draw=fixed", 100)
    assert fixed.for_round(5) is fixed
    assert make_encoder("vqsgd", 100, 3.0).for_round(3).fingerprint == make_encoder("vqsgd", 100, 3.0).fingerprint
    with pytest.raises(ValueError, match="non-negative"):
        enc.for_round(-1)


def test_a_message_of_one_rounds_frame_is_foreign_to_another_round():
    enc = _framed("sstq-flat:b=4", 64)
    x = torch.randn(3, 64)
    blobs = wire.pack(enc.for_round(2), enc.for_round(2).encode(x, np.arange(3)), round=2)
    ok, rejected = wire.unpack_lenient(enc.for_round(2), blobs, round=2)
    assert ok.n == 3 and not rejected
    _, rejected = wire.unpack_lenient(enc.for_round(3), blobs, round=2)  # a server on another round's frame
    assert len(rejected) == 3 and all("foreign" in why for _, why in rejected)


def test_inputs_tuned_to_a_fixed_frame_are_clipped_there_and_not_on_fresh_frames():
    """Walsh flats of the fixed frame need level 4 at d = 2,000 (clipped at 1.9 on every use); on 20 fresh
    frames none of them is clipped."""
    fixed = _framed("sstq-flat:b=4,draw=fixed", 2000)
    flats = torch.cat([flat_vector(fixed.frame, f) for f in walsh_flats(fixed.frame, restarts=50)[:4]])  # type: ignore[arg-type]
    lvl = kashin(fixed.frame, flats, fixed.kashin_cfg).coeffs.abs().amax(1)
    assert bool((lvl > 1.9 * (1 + 1e-6)).all())  # the attack works on the frame it was tuned to
    per_round = _framed("sstq-flat:b=4", 2000)
    clipped = 0
    for t in range(1, 21):
        enc = per_round.for_round(t)
        clipped += int((kashin(enc.frame, flats, enc.kashin_cfg).coeffs.abs().amax(1) > 1.9 * (1 + 1e-6)).sum())
    assert clipped == 0


def test_whp_level_is_the_hoeffding_union_bound():
    assert whp_level(65536, 1e-6) == pytest.approx(math.sqrt(2 * math.log(2 * 65536 / 1e-6)))
    assert whp_level(65536, 1e-6) == pytest.approx(7.16, abs=0.01)
    enc = _framed("sstq-flat:b=4,guarantee=whp", 100)
    assert enc.kashin_cfg.level == pytest.approx(whp_level(256, 1e-6)) and enc.for_round(4).bound == enc.bound


@pytest.mark.parametrize("kind", ["hadamard", "haar"])
def test_the_whp_tail_holds_over_fresh_frames_for_inputs_fixed_in_advance(kind):
    """For a fixed input the fraction of fresh frames on which some minimum-norm coefficient exceeds
    ``√(2 ln(2N/δ))`` is at most δ (δ = 0.2 here, so the check has power): rows of the fixed frame (level √d
    there), a coordinate vector and a dense vector, 300 frames each."""
    d, delta = 48, 0.2
    enc = _framed(f"sstq-flat:b=4,guarantee=whp,whp_delta={delta},frame={kind}", d)
    x = torch.cat([enc.frame.rows(torch.arange(2)), torch.eye(d, dtype=torch.float64)[:1],
                   torch.ones(1, d, dtype=torch.float64)])
    x = x / torch.linalg.vector_norm(x, dim=1, keepdim=True)
    level, frames = whp_level(enc.N, delta), 300
    over = torch.zeros(len(x))
    for t in range(1, frames + 1):
        over += (enc.for_round(t).frame.coef(x).abs().amax(1) > level).double()
    assert bool((over / frames <= delta).all()), over / frames


def test_whp_is_refused_where_its_proof_does_not_apply():
    with pytest.raises(ValueError, match="draw=round"):
        make_encoder("sstq-flat:guarantee=whp,draw=fixed", 100, 3.0)
    with pytest.raises(ValueError, match="frame in"):
        make_encoder("sstq-flat:guarantee=whp,frame=hd3", 100, 3.0)
    with pytest.raises(ValueError, match="biased whatever"):
        make_encoder("sstq-ma:guarantee=whp", 100, 3.0)


@pytest.mark.parametrize("d", [100, 1000, 10000])
def test_whp_mse_is_within_20x_of_the_default_level(d):
    """Exact declared MSE of ``sstq-flat:b=4`` at ε = 3 on unit Gaussian inputs, round 1's frame."""
    x = torch.from_numpy(rng.normal(np.arange(4, dtype=np.uint64), "whp-mse", d))
    x = x / torch.linalg.vector_norm(x, dim=1, keepdim=True)
    base = _framed("sstq-flat:b=4", d).for_round(1).mse(x)
    whp = _framed("sstq-flat:b=4,guarantee=whp", d).for_round(1).mse(x)
    assert base is not None and whp is not None
    assert 2 < float(whp.mean() / base.mean()) <= 20


def test_whp_encodes_are_unbiased_where_not_clipped():
    """``guarantee=whp`` sends the minimum-norm coefficients: the mean of many decodes is the input."""
    enc = _framed("sqkr:guarantee=whp", 32).for_round(2)
    x = torch.randn(1, 32, dtype=torch.float64)
    x = x / torch.linalg.vector_norm(x) * 0.8
    n = 200_000
    msgs = enc.encode(x.repeat(n, 1), np.arange(n), coins=np.arange(n))
    assert msgs.stats["clipped"] == 0
    mean = enc.decode(msgs, np.arange(n)).mean(0)
    sd = enc.decode(msgs, np.arange(n)).std(0) / math.sqrt(n)
    assert float(((mean - x[0]) / sd).abs().max()) < 5


def test_the_secure_schedule_is_short_and_public():
    enc = _framed("sstq-flat:b=4", 200)
    assert enc.secure_cfg.linf_iters == 6 and not enc.secure_cfg.linf_fallback
    assert _framed("sstq-flat:b=4,secure_iters=9", 200).secure_cfg.linf_iters == 9
    assert _framed("sstq-flat:b=4,kashin=lv", 200).secure_cfg == _framed("sstq-flat:b=4,kashin=lv", 200).kashin_cfg


def test_clopper_pearson_upper_bound():
    assert upper95(0, 1000) == pytest.approx(1 - 0.05 ** (1 / 1000), rel=1e-9)
    assert upper95(0, 1000) < 3e-3 and upper95(1, 1000) > upper95(0, 1000) and upper95(5, 5) == 1.0
