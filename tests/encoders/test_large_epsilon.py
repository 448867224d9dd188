"""A very large ε is answered (numerically stable formulas) or refused with one line naming the limit.

Encoders refuse ε above :data:`sstq_fl.encoders.base.MAX_EPSILON` (30): past it their 53-bit coins
cannot realise the ``e^ε`` ratio (from ε ≈ 37.4 an output has probability 0: ε = ∞ in fact).

Before: ``math.exp(1000)`` raised OverflowError in sstq-flat, sqkr, vqsgd, the flat RR event, the
advanced-composition bound, the amplified per-round ε and the exact pure composition; PrivUnit
raised ZeroDivisionError from ε ≈ 37 (ε ≈ 20 at d = 2).
"""

from __future__ import annotations

import json
import math
import re
import time

import numpy as np
import pytest
import torch

from sstq_fl.cli import main
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.base import MAX_EPSILON as ENCODER_MAX
from sstq_fl.encoders.privunit import MAX_EPSILON
from sstq_fl.privacy.errors import AccountingLimitError
from sstq_fl.privacy.events import PureDpEvent, RandomizedResponseEvent, flat_rr_probabilities
from sstq_fl.privacy.ldp import advanced_composition, ldp_plan_report
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.pure_composition import amplified_pure_epsilon, pure_composition_delta, pure_composition_epsilon

from ..conftest import unit_rows

STABLE = ["sstq-flat:b=4", "sstq-flat:b=3,codebook=optimized", "sstq-ma:b=4", "sstq-ma:b=2,codebook=uniform", "sqkr",
          "sqkr:coin=public", "vqsgd"]


@pytest.mark.parametrize("eps", [30.5, 40.0, 710.0, 1e6, 1.7e308])
@pytest.mark.parametrize("spec", STABLE)
def test_encoders_refuse_epsilon_their_coins_cannot_realise(spec, eps):
    with pytest.raises(ValueError, match=re.escape(f"supports epsilon <= {ENCODER_MAX:g}, got epsilon={eps:g}")):
        make_encoder(spec, 12, eps, radius=1.0, seed=4)


@pytest.mark.parametrize("spec", STABLE)
def test_encoders_answer_at_their_maximum_epsilon(spec):
    enc = make_encoder(spec, 12, ENCODER_MAX, radius=1.0, seed=4)
    x = unit_rows(30, 12, seed=1) * 0.7
    msgs = enc.encode(x, np.arange(30), coins=np.arange(30))
    assert torch.isfinite(enc.decode(msgs, coins=np.arange(30))).all()


@pytest.mark.parametrize("spec", ["sstq-flat:b=4", "sstq-flat:b=1", "sstq-ma:b=4"])
def test_at_the_maximum_every_label_is_reachable_and_the_ratio_is_e_to_the_epsilon(spec):
    """Exact channel at ε = 30: every ``P[Z = i | V = k] > 0``; within each output column the largest over
    the smallest is at most ``e^ε``, and the flat channel attains it; the 53-bit keep coin still flips
    (``P[u < p] < 1`` on the grid ``k/2⁵³``)."""
    enc = make_encoder(spec, 12, ENCODER_MAX, seed=4)
    ch = enc.label_channel()
    assert bool((ch > 0).all())
    ratio = float((ch.max(0).values / ch.min(0).values).max())
    assert ratio <= math.exp(ENCODER_MAX) * (1 + 1e-9)
    if hasattr(enc, "p"):
        assert ratio == pytest.approx(math.exp(ENCODER_MAX), rel=1e-9)
        assert math.ceil(enc.p * 2**53) < 2**53  # some uniform on the 53-bit grid flips the label


def test_flat_channel_flips_at_its_maximum_epsilon():
    """At ε = 30 the flip probability 15/(e^30+15) ≈ 1.4·10⁻¹² is resolved by the 53-bit coin."""
    enc = make_encoder("sstq-flat:b=4", 12, ENCODER_MAX, seed=4)
    assert 0 < 1 - enc.p == pytest.approx(15 / (math.exp(ENCODER_MAX) + 15), rel=1e-3)


def test_vqsgd_scale_near_the_noiseless_limit():
    enc = make_encoder("vqsgd", 8, ENCODER_MAX, radius=2.0)
    assert enc.scale == pytest.approx(2.0, rel=1e-9)


@pytest.mark.parametrize("eps", [0.3, 3.0, 30.0, 700.0])
def test_stable_rr_probabilities_are_the_original_formula_below_the_switch(eps):
    e = math.exp(eps)
    assert flat_rr_probabilities(eps, 16) == (e / (e + 15), 1.0 / (e + 15))  # bit for bit


def test_stable_rr_probabilities_above_the_switch():
    p, q = flat_rr_probabilities(705.0, 4)
    assert p == 1.0 and q == pytest.approx(math.exp(-705.0), rel=1e-12)
    assert flat_rr_probabilities(1e6, 4) == (1.0, 0.0)


@pytest.mark.parametrize("eps", [35.0, 50.0, 1000.0])
@pytest.mark.parametrize("cap", ["exact", "paper"])
def test_privunit_refuses_beyond_its_supported_maximum(eps, cap):
    with pytest.raises(ValueError, match=f"privunit supports epsilon <= {MAX_EPSILON:g}, got epsilon={eps:g}"):
        make_encoder(f"privunit:cap={cap}", 10, eps)


@pytest.mark.parametrize("d", [2, 3, 10, 1000])
def test_privunit_works_up_to_its_maximum(d):
    enc = make_encoder("privunit", d, MAX_EPSILON)
    assert enc.exact_epsilon() <= MAX_EPSILON * (1 + 1e-6)
    assert torch.isfinite(enc.decode(enc.encode(unit_rows(3, d), np.arange(3)))).all()


# ---------------------------------------------------------------------- accounting at large ε


def test_event_and_composition_formulas_at_huge_epsilon():
    assert advanced_composition(1000.0, 10, 1e-5) == math.inf
    assert amplified_pure_epsilon(1000.0, 0.1) == pytest.approx(1000.0 + math.log(0.1))
    assert amplified_pure_epsilon(1e6, 1.0) == 1e6
    assert pure_composition_epsilon(1000.0, 10, 1e-5) == pytest.approx(1e4, rel=1e-9)
    assert pure_composition_delta(1000.0, 10, 0.0) == pytest.approx(1.0)
    assert RandomizedResponseEvent.flat(720.0, 4).noise_parameter > 0
    with pytest.raises(ValueError, match="epsilon=1000 flips with a probability below the smallest float64"):
        RandomizedResponseEvent.flat(1000.0, 4)  # underflows to 0: refused, not a silent non-private event


def test_ledger_at_huge_epsilon_answers_or_refuses_in_one_line():
    led = PrivacyLedger()
    led.record(PureDpEvent(1000.0), 10)
    assert led.epsilon(1e-5) == pytest.approx(1e4, rel=1e-9) and led.rdp_epsilon(1e-5) is not None
    few = PrivacyLedger()
    few.record(PureDpEvent(1000.0), 5)
    few.record(PureDpEvent(1e300), 1)  # mixed pure events: the PLD path, sparse (2^6 losses)
    assert few.epsilon(1e-5) >= 1e300
    big = PrivacyLedger()
    big.record(PureDpEvent(1e300))
    assert big.rdp_epsilon(1e-5) is None  # ε² overflows: no cross-check rather than a crash
    mixed = PrivacyLedger()
    mixed.record(PureDpEvent(1000.0), 2000)
    mixed.record(PureDpEvent(999.0), 1)
    with pytest.raises(AccountingLimitError, match="limit 16777216") as info:
        mixed.epsilon(1e-5)
    assert "\n" not in str(info.value)


def test_plan_report_at_huge_epsilon():
    rep = ldp_plan_report(1000.0, 10, 1e-5, sampling_rate=0.1)
    assert rep["basic"] == 1e4 and rep["advanced"] == math.inf and rep["pld"] == pytest.approx(1e4, rel=1e-9)
    amp = rep["amplified"]
    assert math.isfinite(amp["pld"]) and amp["advanced"] == math.inf and amp["per_round"] < 1000
    rep = ldp_plan_report(1000.0, 100_000, 1e-5, sampling_rate=0.1)  # the PLD would be too large: exact instead
    assert rep["amplified"]["accountant"] == "pure-kov" and math.isfinite(rep["amplified"]["pld"])


def test_cli_plan_large_epsilon_and_absurd_rounds(capsys):
    assert main(["privacy", "plan", "--ldp-epsilon", "1000", "--rounds", "10", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["pld"] == pytest.approx(1e4, rel=1e-9) and rep["advanced"] is None  # standard JSON: null = ∞
    assert main(["privacy", "plan", "--ldp-epsilon", "1000", "--rounds", "10", "--sampling-rate", "0.5"]) == 0
    assert "advanced inf" in capsys.readouterr().out
    t = time.perf_counter()
    assert main(["privacy", "plan", "--ldp-epsilon", "1", "--rounds", "100000000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at most 10000000" in err and time.perf_counter() - t < 5
    with pytest.raises(SystemExit) as exc:  # an argument error: argparse exits 2, one line
        main(["privacy", "plan", "--ldp-epsilon", "inf", "--rounds", "10"])
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_ten_million_rounds_answer_fast():
    t = time.perf_counter()
    eps = pure_composition_epsilon(0.5, 10**7, 1e-5)
    assert time.perf_counter() - t < 10 and 5e5 < eps < 5e6
