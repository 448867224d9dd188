"""privunit-mrc: exact privacy over fixed public candidate sets, calibration, wire, batching, bias.

Shah, Chen, Ballé, Kairouz, Theis (AISTATS 2022) compress PrivUnit2 (Bhowmick et al. 2018) by
minimal random coding; the guarantee must hold for every realisation of the public candidates.
"""

import math

import numpy as np
import pytest
import torch

from sstq_fl import wire
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.privunit_mrc import index_law
from sstq_fl.encoders.seeded import public_seeds

from ..conftest import unit_rows

R = 0.7


def candidates(enc, s):
    """The candidate matrix ``[N, P]`` named by the sent seed ``s``."""
    cseeds = public_seeds(enc, np.full(enc.N, s), None, enc.N)
    return enc.cands.rows(torch.arange(enc.N), enc.cands.signs(cseeds))


def scores(enc, s, v):
    """The encoder's own (float32) scores of the padded unit directions ``v`` ``[n, P]``."""
    cseeds = public_seeds(enc, np.full(v.shape[0], s), None, v.shape[0])
    return enc.cands.scores((v / enc.P**1.5).float(), enc.cands.signs(cseeds)).double()


def message_law(enc, x):
    """Exact ``P(S = s, K = k | x)`` ``[inputs, 2^seed_bits * N]``: uniform seed, sign-flip mixture."""
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    u = torch.zeros(x.shape[0], enc.P, dtype=torch.float64)
    u[:, 0] = 1.0
    u[:, : enc.dim] = torch.where(norms > 0, x / norms.clamp_min(1e-300), u[:, : enc.dim])
    keep = (1 + norms / enc.radius) / 2
    n_seeds = 1 << enc.cfg["seed_bits"]
    laws = [keep * index_law(scores(enc, s, u), enc.epsilon, enc.beta)
            + (1 - keep) * index_law(scores(enc, s, -u), enc.epsilon, enc.beta) for s in range(n_seeds)]
    return torch.cat(laws, 1) / n_seeds


def adversarial(enc, rows):
    """Zero, ±R e_i, random directions at norms R and R/3, and ±R times candidate directions."""
    d = enc.dim
    xs = [torch.zeros(d, dtype=torch.float64)]
    for i in range(d):
        e = torch.zeros(d, dtype=torch.float64)
        e[i] = R
        xs += [e, -e]
    xs += list(unit_rows(6, d, seed=3, norm=R)) + list(unit_rows(3, d, seed=4, norm=R / 3))
    for c in rows[:6, :d]:
        if c.norm() > 1e-6:
            xs += [R * c / c.norm(), -R * c / c.norm()]
    return torch.stack(xs)


@pytest.mark.parametrize("eps", [0.5, 3.0])
@pytest.mark.parametrize("d,bits", [(3, 3), (4, 4), (6, 4), (8, 5)])
def test_exact_privacy_over_public_candidate_sets(d, bits, eps):
    enc = make_encoder(f"privunit-mrc:bits={bits},seed_bits=2", d, eps, radius=R)
    law = message_law(enc, adversarial(enc, candidates(enc, 0)))
    assert torch.allclose(law.sum(1), torch.ones(law.shape[0], dtype=torch.float64))
    ratio = float((law.max(0).values / law.min(0).values).max())
    assert ratio <= math.exp(eps) * (1 + 1e-9)
    if d == enc.P and enc.s >= 1:  # x = R U_0 ranks U_0 first, x' = -x ranks it last: the bound is attained
        assert ratio == pytest.approx(math.exp(eps), rel=1e-9)


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0, 8.0, 30.0])
def test_band_law_holds_for_any_scores_and_is_tight(eps):
    enc = make_encoder("privunit-mrc:bits=6", 20, eps)
    g = torch.from_numpy(np.random.default_rng(0).standard_normal((5, enc.N)))
    tied = torch.zeros(3, enc.N, dtype=torch.float64)
    tied[1, :7] = 1.0
    tied[2] = torch.arange(enc.N).double() % 3
    law = index_law(torch.cat([g, -g, tied, g.round()]), eps, enc.beta)
    assert torch.allclose(law.sum(1), torch.ones(law.shape[0], dtype=torch.float64))
    lo, hi = enc.beta / enc.N, enc.alpha / enc.N
    assert (law >= lo * (1 - 1e-12)).all() and (law <= hi * (1 + 1e-12)).all()
    assert enc.exact_epsilon() == pytest.approx(eps, rel=1e-12)
    assert math.exp(-eps) < enc.beta < 1 and enc.privacy_event().epsilon == eps
    if enc.s >= 1:  # candidate 0 first for g[0], last for -g[0]... via a constructed pair of score rows
        pair = torch.zeros(2, enc.N, dtype=torch.float64)
        pair[0, 0], pair[1, 0] = 1.0, -1.0
        w = index_law(pair, eps, enc.beta)
        assert float(w[0, 0] / w[1, 0]) == pytest.approx(math.exp(eps), rel=1e-12)


def test_candidates_are_unit_rows_and_scores_are_inner_products():
    enc = make_encoder("privunit-mrc:bits=5,seed_bits=3", 6, 2.0)  # P = 8: four blocks
    c = candidates(enc, 5)
    assert torch.allclose(c.norm(dim=1), torch.ones(enc.N, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(c[:8] @ c[:8].T, torch.eye(8, dtype=torch.float64), atol=1e-12)  # one block: orthonormal
    v = torch.nn.functional.pad(unit_rows(3, 6, seed=1), (0, 2))
    assert torch.allclose(scores(enc, 5, v), v @ c.T, atol=1e-6)


def test_sampler_follows_the_exact_law():
    enc = make_encoder("privunit-mrc:bits=3,seed_bits=1", 4, 1.0, radius=R)
    x = unit_rows(1, 4, seed=9, norm=0.6 * R)
    law = message_law(enc, x)[0]
    n = 60000
    msgs = enc.encode(x.repeat(n, 1), np.arange(n))
    cell = msgs.fields["s"][:, 0] * enc.N + msgs.fields["k"][:, 0]
    freq = torch.bincount(cell, minlength=law.numel()).double() / n
    assert ((freq - law).abs() <= 5 * (law * (1 - law) / n).sqrt()).all()


@pytest.mark.parametrize("spec,bits", [("privunit-mrc", 32), ("privunit-mrc:bits=10,seed_bits=6", 16),
                                        ("privunit-mrc:coin=public", 12), ("privunit-mrc:seed_bits=0", 12)])
def test_wire_bits_round_trip(spec, bits):
    d = 1000
    enc = make_encoder(spec, d, 3.0, radius=1.0)
    assert enc.payload_bits() == bits == sum(f.total_bits for f in enc.layout())
    msgs = enc.encode(unit_rows(5, d, seed=2).float(), np.arange(5), coins=np.arange(5) + 9)
    blobs = wire.pack(enc, msgs, round=3)
    assert all(len(b) - wire.HEADER_BYTES == (bits + 7) // 8 for b in blobs)
    back = wire.unpack(enc, blobs, round=3)
    assert torch.equal(enc.decode(back, coins=np.arange(5) + 9), enc.decode(msgs, coins=np.arange(5) + 9))


@pytest.mark.parametrize("spec", ["privunit-mrc", "privunit-mrc:coin=public"])
def test_batch_equals_one_at_a_time(spec):
    d = 3000
    enc = make_encoder(spec, d, 3.0, radius=1.0)
    x = unit_rows(9, d, seed=2).float()
    x[3] *= 0.01
    x[4] = 0.0
    seeds = np.array([11, 3, 99, 5, 0, 7, 123456789, 8, 2**40])
    batch = enc.encode(x, seeds, coins=seeds + 1)
    for i in range(9):
        one = enc.encode(x[i : i + 1], seeds[i : i + 1], coins=seeds[i : i + 1] + 1)
        for k, v in batch.fields.items():
            assert torch.equal(one.fields[k][0], v[i]), (spec, k, i)
    est = enc.decode(batch, coins=seeds + 1)
    assert torch.isfinite(est).all() and torch.allclose(est.norm(dim=1)[0], est.norm(dim=1)[0])


def test_bias_small_and_mse_matches_the_ideal_model():
    """Hadamard candidates are only approximately i.i.d. uniform: the measured bias must be invisible at
    n = 30000 (``n‖mean − x‖²/MSE`` near 1) and the MSE within 5% of the i.i.d. model's."""
    d, n = 24, 30000
    enc = make_encoder("privunit-mrc:bits=8", d, 2.0, radius=0.5)
    x = unit_rows(1, d, seed=5, norm=0.4)[0]
    est = enc.decode(enc.encode(x.repeat(n, 1), np.arange(n)))
    err = ((est - x) ** 2).sum(1)
    ideal = float(enc.ideal_mse(x[None])[0])
    assert float(err.mean()) == pytest.approx(ideal, rel=0.05)
    stat = float(((est.mean(0) - x) ** 2).sum()) * n / float(err.mean())
    assert 0.3 < stat < 2.5, stat


def test_public_coin_needs_coins_and_bad_parameters_are_refused():
    enc = make_encoder("privunit-mrc:coin=public", 10, 1.0)
    with pytest.raises(ValueError, match="coins"):
        enc.encode(unit_rows(1, 10), [0])
    for spec in ["privunit-mrc:bits=0", "privunit-mrc:bits=25", "privunit-mrc:seed_bits=33"]:
        with pytest.raises(ValueError, match="bits"):
            make_encoder(spec, 10, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        make_encoder("privunit-mrc", 10, 31.0)
