"""rrsc / rrsc-fast: conformance, exact privacy for every rotation, the exact calibration, wire, batching,
the structured rotation's bias, and the authors' own figures on a small setting.

Isik, Chen, Özgür, Weissman, No (NeurIPS 2023) rotate the regular simplex at random and give the ``k``
best-scoring codewords weight ``e^ε``; the guarantee must hold for every rotation.
"""

import math

import numpy as np
import pytest
import torch

from sstq_fl import rng, wire
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.base import WireError
from sstq_fl.encoders.rrsc import best_k, haar_columns, mean_norm, score_mean, top_sum, vertex_rows
from sstq_fl.testing import CHECKS, check_encoder
from sstq_fl.testing.wirecheck import forge

from ..conftest import unit_rows

R = 0.7
SPECS = ["rrsc", "rrsc:bits=2,coin=public", "rrsc:bits=2,seed_bits=14", "rrsc-fast:bits=2,coin=public",
         "rrsc:bits=3,codewords=5,coin=public", "rrsc-fast:bits=3,k=3,seed_bits=6"]


@pytest.mark.parametrize("spec", SPECS)
def test_the_kit_passes(spec):
    report = check_encoder(spec, dim=6, epsilon=1.0)
    assert [r.name for r in report] == list(CHECKS)
    assert report.passed, str(report)
    # exact wherever the messages can be enumerated; the default's 2^20 sent seeds are audited instead
    assert report.get("epsilon-ldp").detail.startswith("exact" if spec != "rrsc" else "audit")


@pytest.mark.parametrize("spec,dim,eps", [("rrsc:bits=2,coin=public", 5, 4.0), ("rrsc-fast:bits=3", 8, 0.5),
                                          ("rrsc:bits=2,seed_bits=12", 9, 2.0)])
def test_the_kit_passes_at_other_epsilons_and_dims(spec, dim, eps):
    report = check_encoder(spec, dim=dim, epsilon=eps, radius=R, trials=8000, audit_trials=8000)
    assert report.passed, str(report)


def adversarial(d, seed):
    """Zero, ±R e_i, random directions at norms R and R/3."""
    xs = [torch.zeros(d, dtype=torch.float64)]
    for i in range(d):
        e = torch.zeros(d, dtype=torch.float64)
        e[i] = R
        xs += [e, -e]
    return torch.cat([torch.stack(xs), unit_rows(8, d, seed=seed, norm=R), unit_rows(4, d, seed=seed + 1, norm=R / 3)])


@pytest.mark.parametrize("name", ["rrsc", "rrsc-fast"])
@pytest.mark.parametrize("d,bits,eps", [(4, 2, 0.5), (8, 3, 3.0), (16, 4, 8.0), (6, 1, 1.0)])
def test_exact_epsilon_for_every_rotation(name, d, bits, eps):
    """Given the rotation, the worst log-ratio over inputs is exactly ε (x and −x rank a codeword oppositely)."""
    enc = make_encoder(f"{name}:bits={bits},coin=public", d, eps, radius=R)
    xs = adversarial(d, seed=bits)
    for coin in range(5):
        _, law = enc.output_law(xs, coins=np.array([coin]))
        assert torch.allclose(law.sum(1), torch.ones(len(xs), dtype=torch.float64))
        worst = float(torch.log(law.max(0).values / law.min(0).values).max())
        assert worst == pytest.approx(eps, rel=1e-9)


def test_exact_epsilon_over_sent_rotation_seeds():
    enc = make_encoder("rrsc:bits=2,seed_bits=3", 5, 2.0, radius=R)
    msgs, law = enc.output_law(adversarial(5, seed=3))
    assert law.shape == (len(adversarial(5, 3)), 32) and msgs.n == 32
    assert float(torch.log(law.max(0).values / law.min(0).values).max()) == pytest.approx(2.0, rel=1e-9)
    big = make_encoder("rrsc:bits=4,seed_bits=16", 16, 2.0)  # 2^16 seeds × 16 indices: too many to enumerate
    assert big.output_law is None  # the kit audits it instead
    with pytest.raises(ValueError, match="lower seed_bits"):
        big.message_law(adversarial(16, 3)[:1])


def test_sampler_follows_the_exact_law_given_the_rotation():
    enc = make_encoder("rrsc:bits=3,coin=public", 8, 1.5, radius=R)
    x = unit_rows(1, 8, seed=9, norm=0.6 * R)
    n = 40000
    coins = np.full(n, 17)
    k = enc.encode(x.repeat(n, 1), np.arange(n), coins=coins).fields["k"][:, 0]
    law = enc.output_law(x, coins=np.array([17]))[1][0]
    freq = torch.bincount(k, minlength=8).double() / n
    assert ((freq - law).abs() <= 5 * (law * (1 - law) / n).sqrt()).all()


def test_expected_top_sums_of_normals():
    """``T_k(M)``: closed forms for M ≤ 4 and a Monte-Carlo check at M = 64."""
    assert top_sum(2, 1) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-12)
    assert top_sum(3, 1) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-12)
    assert top_sum(3, 2) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-12)  # the middle one has mean 0
    assert top_sum(4, 1) == pytest.approx(1.0293753730039641, rel=1e-12)
    g = np.sort(np.random.default_rng(0).standard_normal((200000, 64)), axis=1)
    for k in (1, 5, 32, 63):
        sums = g[:, -k:].sum(1)
        assert abs(top_sum(64, k) - sums.mean()) < 5 * sums.std() / math.sqrt(len(sums))
    assert mean_norm(1) == pytest.approx(math.sqrt(2 / math.pi), rel=1e-12)


@pytest.mark.parametrize("d,m,k", [(5, 4, 1), (12, 8, 3), (40, 16, 7)])
def test_score_mean_matches_haar_rotations(d, m, k):
    """The derivation ``E[top-k ⟨u, A s_j⟩] = √(M/(M−1)) T_k(M)/E‖g‖`` against sampled Haar rotations."""
    n = 20000
    a = haar_columns(rng.derive_seeds(np.arange(n, dtype=np.uint64) + np.uint64(d * 1000 + m)), d, m)
    u = unit_rows(1, d, seed=m)[0]
    scores = torch.einsum("d,ndm,jm->nj", u, a, vertex_rows(m, torch.arange(m)))
    top = torch.topk(scores, k, dim=1).values.sum(1)
    assert abs(float(top.mean()) - score_mean(d, m, k)) < 5 * float(top.std()) / math.sqrt(n)
    gram = a[:50].transpose(1, 2) @ a[:50]
    assert torch.allclose(gram, torch.eye(m, dtype=torch.float64).expand(50, m, m), atol=1e-12)


def test_best_k_is_the_exact_minimiser():
    for m, eps in [(8, 1.0), (64, 6.0), (64, 0.5), (600, 2.0)]:
        e = math.expm1(eps)
        brute = min(range(1, m), key=lambda k: (k * e + m) / top_sum(m, k))
        assert best_k(m, eps) == brute
    assert best_k(64, 0.05) >= 16  # at small ε about half the codewords get e^ε


def test_decoded_norm_and_declared_mse():
    enc = make_encoder("rrsc:bits=4,coin=public", 40, 3.0, radius=R)
    x = unit_rows(3, 40, seed=1, norm=0.5)
    x[2] *= 10  # clipped onto the ball
    s = np.arange(3)
    est = enc.decode(enc.encode(x, s, coins=s), coins=s)
    assert torch.allclose(est.norm(dim=1), torch.full((3,), R * enc.scale, dtype=torch.float64))
    want = (R * enc.scale) ** 2 - torch.tensor([0.25, 0.25, R * R], dtype=torch.float64)
    assert torch.allclose(enc.mse(x), want)


def test_out_of_range_index_is_refused_on_the_wire():
    enc = make_encoder("rrsc:bits=3,codewords=5,coin=public", 6, 1.0)
    assert enc.layout()[0].limit == 5
    for bad in (5, 7):
        with pytest.raises(WireError, match="out of range"):
            wire.unpack(enc, [forge(enc, {"k": np.array([bad])})], round=3)
    assert wire.unpack(enc, [forge(enc, {"k": np.array([4])})], round=3).fields["k"].item() == 4


@pytest.mark.parametrize("spec", ["rrsc:bits=4", "rrsc:bits=4,coin=public", "rrsc-fast:bits=5", "mmrc:bits=4",
                                  "mmrc:bits=3,coin=public"])
def test_batch_equals_one_at_a_time_with_seeds_and_keys(spec):
    """rrsc, rrsc-fast and mmrc (one index into seed-named public choices): a batch equals one message at a time."""
    d = 40
    enc = make_encoder(spec, d, 3.0)
    x = unit_rows(7, d, seed=2)
    x[3] *= 0.01
    x[4] = 0.0
    for seeds in (np.array([11, 3, 99, 5, 0, 7, 2**40]), rng.fresh_keys(7)):
        coins = np.arange(7) + 5
        batch = enc.encode(x, seeds, coins=coins)
        for i in range(7):
            one = enc.encode(x[i : i + 1], seeds[i : i + 1], coins=coins[i : i + 1])
            for key, v in batch.fields.items():
                assert torch.equal(one.fields[key][0], v[i]), (spec, key, i)


@pytest.mark.parametrize("spec,bits", [("rrsc", 22), ("rrsc:coin=public", 2), ("rrsc:bits=6,seed_bits=16", 22),
                                        ("rrsc:bits=5,seed_bits=0", 5), ("rrsc-fast:bits=9,coin=public", 9),
                                        ("rrsc:bits=3,codewords=6,coin=public", 3)])
def test_bits_formula_equals_the_layout(spec, bits):
    enc = make_encoder(spec, 600, 2.0)
    assert enc.payload_bits() == enc.formula_bits() == bits == sum(f.total_bits for f in enc.layout())


@pytest.mark.parametrize("spec,dim,words", [("rrsc:bits=3", 6, "dimension >= M"), ("rrsc:bits=2,k=4", 6, "k must be"),
                                            ("rrsc:bits=2,codewords=5", 6, "codewords must be"),
                                            ("rrsc:bits=12", 25000, "rrsc-fast"), ("rrsc-fast:bits=4", 7, "dimension >= M"),
                                            ("rrsc:bits=17", 10**6, "bits"), ("rrsc:coin=private", 20, "coin"),
                                            ("rrsc", 1, "dim >= 2")])
def test_bad_parameters_are_one_line_errors(spec, dim, words):
    with pytest.raises(ValueError, match=words) as exc:
        make_encoder(spec, dim, 1.0)
    assert "\n" not in str(exc.value)


def test_public_coin_needs_coins():
    with pytest.raises(ValueError, match="coins"):
        make_encoder("rrsc:bits=2,coin=public", 6, 1.0).encode(unit_rows(1, 6), [0])


@pytest.mark.parametrize("name,d,eps,bits", [("rrsc", 600, 2.0, 2), ("rrsc", 600, 6.0, 6), ("rrsc", 7, 6.0, 2),
                                             ("rrsc", 600, 30.0, 8), ("rrsc", 40000, 9.0, 8), ("rrsc", 100000, 9.0, 7),
                                             ("rrsc-fast", 7, 6.0, 3), ("rrsc-fast", 10**6, 9.0, 8)])
def test_automatic_bits(name, d, eps, bits):
    """``bits = 0``: ``min(⌈ε⌉, ⌊log2 D⌋, 8)``, lowered while a Haar rotation costs more than the limit."""
    assert make_encoder(name, d, eps).bits == bits


@pytest.mark.parametrize("d,bits", [(32, 3), (200, 4)])
def test_fast_rotation_bias_invisible_and_mse_at_most_haar(d, bits):
    """The Hadamard rotation is only approximately Haar: ``n‖mean − x‖²/MSE`` must stay near 1 (it is
    ``χ²_d/d``-like when unbiased) and the MSE must equal the Haar formula on ``S^{P−1}`` at ``d = P``."""
    n = 20000
    enc = make_encoder(f"rrsc-fast:bits={bits},coin=public", d, 2.0, radius=1.0)
    x = unit_rows(1, d, seed=5, norm=0.8)[0]
    s = np.arange(n, dtype=np.uint64)
    est = enc.decode(enc.encode(x.repeat(n, 1), s, coins=s + 11), coins=s + 11)
    err = ((est - x) ** 2).sum(1)
    haar = enc.scale**2 - 0.64
    if d == enc.P:
        assert float(err.mean()) == pytest.approx(haar, rel=0.02)
    else:
        assert float(err.mean()) < haar
    stat = float(((est.mean(0) - x) ** 2).sum()) * n / float(err.mean())
    assert abs(stat - 1) < 5 * math.sqrt(2 / d), stat


# The authors' code (BerivanIsik/rrsc at 13e6a58) on d = 32, n = 400, ε = 4, bits = 3, 40 repetitions, data as in
# their main.py after np.random.seed(700 + rep); their estimate_k_and_bias with T = 10⁶ after np.random.seed(7).
# Produced by: OMP_NUM_THREADS=1 python benchmarks/oracle_isik.py ORACLE_DIR - --record-small
THEIR_K, THEIR_BIAS = 1, 4.238107638451336
THEIR_RRSC = (0.044193512665835266, 0.04037232018702189, 0.048014705144648645)  # mean, 95% interval
THEIR_MMRC = (0.12832473469039107, 0.11600030479936133, 0.14064916458142082)
THEIR_MMRC_M_TILDE, THEIR_MMRC_GAMMA = 0.13796888594315707, 0.17143626424431826


def authors_data(d, n, seed):
    """Their main.py's inputs: half N(10, 1), half N(1, 1), normalised (legacy numpy stream of the seed)."""
    rs = np.random.RandomState(seed)
    x = np.zeros((n, d))
    for j in range(n // 2):
        v1, v2 = rs.normal(10, 1, d), rs.normal(1, 1, d)
        x[j], x[j + n // 2] = v1 / np.linalg.norm(v1), v2 / np.linalg.norm(v2)
    return torch.from_numpy(x)


def test_the_authors_figures_on_a_small_setting():
    d, n, eps, reps = 32, 400, 4.0, 40
    r, m = make_encoder("rrsc:bits=3,coin=public", d, eps), make_encoder("mmrc:bits=3,coin=public", d, eps)
    assert r.k == THEIR_K and r.scale == pytest.approx(THEIR_BIAS, rel=3e-3)  # theirs: Monte Carlo, T = 10⁶
    assert m.m_tilde == pytest.approx(THEIR_MMRC_M_TILDE, rel=1e-9) and m.gamma == pytest.approx(THEIR_MMRC_GAMMA, rel=1e-12)
    runs = {"rrsc": [], "mmrc": []}
    for rep in range(reps):
        x = authors_data(d, n, 700 + rep)
        s = rng.derive_seeds(np.uint64(rep), np.arange(n, dtype=np.uint64))
        for name, enc in (("rrsc", r), ("mmrc", m)):
            runs[name].append(float(((enc.aggregate(enc.encode(x, s, coins=s), coins=s) - x.mean(0)) ** 2).sum()))
    for name, (mean, lo, hi), exact in (("rrsc", THEIR_RRSC, (r.scale**2 - 1) / n),
                                        ("mmrc", THEIR_MMRC, (1 / m.m_tilde**2 - m.bias_factor**2) / n)):
        assert lo <= exact <= hi, (name, exact)
        ours = np.asarray(runs[name])
        half = 2.03 * ours.std(ddof=1) / math.sqrt(reps)
        assert abs(ours.mean() - mean) <= math.hypot(half, (hi - lo) / 2), (name, ours.mean(), mean)
