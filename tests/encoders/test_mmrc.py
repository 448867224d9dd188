"""mmrc: conformance, the band law against the authors' modify_pi loop, exact privacy for every candidate set,
the authors' calibration constants, the exact bias of their debiasing, wire, batching and bad parameters.

Shah, Chen, Ballé, Kairouz, Theis (AISTATS 2022) simulate PrivUnit2 by minimal random coding and clip the index
law into a band, which makes it ε-LDP for every realisation of the public candidates.
"""

import math
import os
import sys

import numpy as np
import pytest
import torch

from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.mmrc import band_law, calibrate_mmrc, paper_p_tilde
from sstq_fl.encoders.seeded import public_seeds
from sstq_fl.testing import CHECKS, check_encoder

from ..conftest import unit_rows

R = 0.7
SPECS = ["mmrc", "mmrc:bits=3,coin=public", "mmrc:bits=2,seed_bits=14", "mmrc:bits=2,cap=exact,debias=exact,coin=public",
         "mmrc:bits=5,coin=public"]


@pytest.mark.parametrize("spec", SPECS)
def test_the_kit_passes(spec):
    report = check_encoder(spec, dim=6, epsilon=1.0)
    assert [r.name for r in report] == list(CHECKS)
    assert report.passed, str(report)
    # exact wherever the messages can be enumerated; the default's 2^20 sent seeds are audited instead
    assert report.get("epsilon-ldp").detail.startswith("exact" if spec != "mmrc" else "audit")


@pytest.mark.parametrize("spec,dim,eps", [("mmrc:bits=3,coin=public", 5, 4.0),
                                          ("mmrc:bits=2,debias=exact,coin=public", 9, 0.5)])
def test_the_kit_passes_at_other_epsilons_and_dims(spec, dim, eps):
    report = check_encoder(spec, dim=dim, epsilon=eps, radius=R, trials=8000, audit_trials=8000)
    assert report.passed, str(report)


def reference_modify_pi(pi, eps, c1):
    """The authors' ``modify_pi`` (η = ε/2, factor ``c₁e^{−ε/2}``) re-stated as a loop: fix the side violated less,
    trade the other side's excess against it in argsort order, then clip and renormalise in proportion to ``π``."""
    n = len(pi)
    hi, lo = c1 / n, c1 * math.exp(-eps) / n
    above, below = np.maximum(pi - hi, 0).sum(), np.maximum(lo - pi, 0).sum()
    if above == 0 and below == 0:
        return pi
    new = pi.copy()
    if above > below:
        new[pi < lo] = lo
        budget = below
        for i in np.argsort(hi - pi):
            diff = new[i] - hi
            if diff > budget:
                new[i] -= budget
                break
            if diff > 0:
                new[i] -= diff
                budget -= diff
        while (excess := np.maximum(new - hi, 0).sum()) > 0:
            top = new >= hi
            new[top] = hi
            new[~top] += excess * pi[~top] / pi[~top].sum()
        return new
    new[pi > hi] = hi
    budget = above
    for i in np.argsort(pi - lo):
        diff = lo - new[i]
        if diff > budget:
            new[i] += budget
            break
        if diff > 0:
            new[i] += diff
            budget -= diff
    while (deficit := np.maximum(lo - new, 0).sum()) > 0:
        bottom = new <= lo
        new[bottom] = lo
        new[~bottom] -= deficit * pi[~bottom] / pi[~bottom].sum()
    return new


def random_two_valued(gen):
    """A random ``(in_cap, c₁, c₂, ε)`` with ``c₁e^{−ε} ≤ 1 ≤ c₁`` (as PrivUnit2's densities are); ``c₁/c₂`` up to
    ``e^{2ε}``, beyond PrivUnit2's ``e^ε``, so that both sides of the band can be violated at once."""
    while True:
        n, eps = int(2 ** gen.integers(1, 9)), float(gen.uniform(0.2, 8))
        c2 = float(gen.uniform(0.01, 1.0))
        c1 = c2 * math.exp(eps * gen.uniform(0.01, 2.0))
        if c1 * math.exp(-eps) <= 1 <= c1:
            in_cap = np.zeros(n, bool)
            in_cap[gen.permutation(n)[: gen.integers(0, n + 1)]] = True
            return in_cap, c1, c2, eps


def test_band_law_is_the_modify_pi_loop():
    gen = np.random.default_rng(0)
    cases = set()
    for _ in range(1500):
        in_cap, c1, c2, eps = random_two_valued(gen)
        pi = np.where(in_cap, c1, c2) / np.where(in_cap, c1, c2).sum()
        ours = band_law(torch.from_numpy(in_cap), c1, c2, eps).numpy()
        np.testing.assert_allclose(ours, reference_modify_pi(pi, eps, c1), rtol=1e-9, atol=1e-15)
        hi, lo = c1 / len(pi), c1 * math.exp(-eps) / len(pi)
        assert (ours <= hi * (1 + 1e-12)).all() and (ours >= lo * (1 - 1e-12)).all()
        cases.add((bool((pi > hi).any()), bool((pi < lo).any())))
    assert cases == {(False, False), (True, False), (False, True), (True, True)}  # every branch exercised


@pytest.mark.skipif(not os.environ.get("ISIK_ORACLE"), reason="set ISIK_ORACLE to an export of BerivanIsik/rrsc")
def test_band_law_is_the_authors_modify_pi():
    sys.path.insert(0, os.environ["ISIK_ORACLE"])
    from utilities.modify_pi import modify_pi

    gen = np.random.default_rng(1)
    for _ in range(1500):
        in_cap, c1, c2, eps = random_two_valued(gen)
        pi = np.where(in_cap, c1, c2) / np.where(in_cap, c1, c2).sum()
        theirs = modify_pi(pi, eps / 2, eps, c1 / math.exp(eps / 2))[-1]
        np.testing.assert_allclose(band_law(torch.from_numpy(in_cap), c1, c2, eps).numpy(), theirs, rtol=1e-9)


@pytest.mark.parametrize("d,bits,eps", [(4, 2, 0.5), (8, 3, 3.0), (16, 4, 8.0)])
def test_epsilon_holds_for_every_candidate_set(d, bits, eps):
    enc = make_encoder(f"mmrc:bits={bits},coin=public", d, eps, radius=R)
    xs = torch.cat([unit_rows(30, d, seed=bits, norm=R), unit_rows(5, d, seed=9, norm=R / 3),
                    torch.zeros(1, d, dtype=torch.float64)])
    worst = 0.0
    for coin in range(6):
        pub = public_seeds(enc, None, np.array([coin]), 1)
        cand = enc._matrix(pub)[0].T  # [N, d]
        x = torch.cat([xs, R * cand, -R * cand])
        law = enc.output_law(x, coins=np.array([coin]))[1]
        assert torch.allclose(law.sum(1), torch.ones(len(x), dtype=torch.float64))
        worst = max(worst, float(torch.log(law.max(0).values / law.min(0).values).max()))
    assert 0.5 * eps < worst <= eps * (1 + 1e-9)


# The authors' get_parameters_unbiased_miracle (BerivanIsik/rrsc at 13e6a58) at d = 500:
# (ε, N) -> (γ, c₁, m̃); N does not change γ or c₁.
THEIRS = {(6.0, 64): (0.0863172584510659, 31.507365746376163, 0.05973889754432359),
          (2.0, 4): (0.02636676708574971, 2.6155069986656416, 0.018990943825584757),
          (4.0, 16): (0.043194167501890625, 5.2389893034732005, 0.04134747304011706)}


@pytest.mark.parametrize("eps,n_cand", sorted(THEIRS))
def test_calibration_equals_the_authors(eps, n_cand):
    gamma, c1, m_tilde = THEIRS[(eps, n_cand)]
    cal = calibrate_mmrc(500, n_cand, eps, "paper")
    assert cal["gamma"] == pytest.approx(gamma, rel=1e-12)
    assert cal["c1"] == pytest.approx(c1, rel=1e-12)
    assert cal["m_paper"] == pytest.approx(m_tilde, rel=1e-9)
    assert cal["c1"] * math.exp(-eps) <= 1 <= cal["c1"]
    assert paper_p_tilde(n_cand, cal["c1"], cal["c2"], cal["p"], eps) < 1


@pytest.mark.parametrize("debias", ["paper", "exact"])
def test_measured_bias_equals_the_exact_bias_factor(debias):
    """``E⟨x̂, x⟩/‖x‖² = m/m̃``: 1.022… with the authors' ``m̃`` at d = 16, ε = 2, 3 bits, 1 with ``debias=exact``."""
    d, n = 16, 60000
    enc = make_encoder(f"mmrc:bits=3,debias={debias},coin=public", d, 2.0, radius=1.0)
    x = unit_rows(1, d, seed=4, norm=0.9)[0]
    s = np.arange(n, dtype=np.uint64)
    est = enc.decode(enc.encode(x.repeat(n, 1), s, coins=s), coins=s)
    proj = est @ x / float(x @ x)
    assert abs(float(proj.mean()) - enc.bias_factor) < 5 * float(proj.std()) / math.sqrt(n)
    assert (enc.bias_factor > 1.01) == (debias == "paper")
    err = ((est - x) ** 2).sum(1)
    assert float(err.mean()) == pytest.approx(float(enc.mse(x[None])[0]), rel=0.02)


@pytest.mark.parametrize("spec,bits", [("mmrc", 22), ("mmrc:coin=public", 2), ("mmrc:bits=6,seed_bits=16", 22),
                                        ("mmrc:bits=2,seed_bits=0", 2), ("mmrc:bits=12,coin=public", 12)])
def test_bits_formula_equals_the_layout(spec, bits):
    enc = make_encoder(spec, 50, 2.0)
    assert enc.payload_bits() == enc.formula_bits() == bits == sum(f.total_bits for f in enc.layout())


@pytest.mark.parametrize("spec,dim,eps,words", [("mmrc:bits=13", 50, 1.0, "bits"), ("mmrc", 1, 1.0, "dim >= 2"),
                                                ("mmrc:cap=loose", 10, 1.0, "cap"), ("mmrc", 10, 31.0, "epsilon"),
                                                ("mmrc:seed_bits=40,coin=message", 10, 1.0, "seed_bits"),
                                                ("mmrc:bits=10", 25450, 1.0, "lower bits")])
def test_bad_parameters_are_one_line_errors(spec, dim, eps, words):
    with pytest.raises(ValueError, match=words) as exc:
        make_encoder(spec, dim, eps)
    assert "\n" not in str(exc.value)
