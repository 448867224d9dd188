"""Privacy reports for LDP federated training.

Each message is pure ε-LDP (replace-one over the client's vector).  Over ``T`` rounds in which
a client takes part (every round with full participation; the worst case under sampling) its
loss composes as

- basic: ``T ε``;
- advanced (Dwork, Rothblum & Vadhan 2010): ``ε √(2 T ln(1/δ)) + T ε (e^ε − 1)`` at ``δ``;
- PLD: the exact numerical composition of ``T`` pure-ε mechanisms at ``δ``.

With client subsampling (each client joins a round independently with probability ``q``)
two figures are reported, each with the threat model it holds under:

- ``identified``: the server sees which client sent which message, so sampling gives no
  amplification; the loss is the composition over the rounds the client actually joined
  (reported for the expected count ``⌈qT⌉``, the binomial 99th percentile, and all ``T``);
- ``amplified``: the observer does not learn whether a client took part in a round (it
  sees only an aggregate, or anonymised/shuffled messages, and an absent client is
  indistinguishable from one that encoded a public null input); each round is then
  ``log(1 + q(e^ε − 1))``-DP and ``T`` rounds compose by PLD (by the exact optimal
  composition of that pure ε instead, ``accountant: pure-kov``, where the PLD would exceed
  the ledger's size limit, as it does for a very large ε).

Large ε is answered, not crashed on: a figure that exceeds the float range (``e^ε`` in the
advanced bound for ε ≳ 709) is ``inf``.  At most :data:`~sstq_fl.privacy.errors.MAX_EVENTS`
rounds are accepted.
"""

from __future__ import annotations

import math
from typing import Any

from scipy import stats

from .errors import MAX_EVENTS, AccountingLimitError
from .events import PoissonSampledEvent, PureDpEvent
from .floats import EXP_SAFE
from .ledger import PrivacyLedger
from .pure_composition import amplified_pure_epsilon, pure_composition_epsilon

IDENTIFIED = ("server sees which client sent each message: no amplification from sampling; "
              "composition over the rounds the client actually joined")
AMPLIFIED = ("observer does not learn whether a client took part in a round (aggregate-only or anonymised/shuffled "
             "messages, an absent client indistinguishable from one encoding a public null input); Poisson "
             "participation with rate q")


def advanced_composition(epsilon: float, rounds: int, delta: float) -> float:
    """Dwork–Rothblum–Vadhan: ``T`` ε-DP mechanisms are ``(ε', δ)``-DP with this ``ε'``
    (``inf`` once ``T ε (e^ε − 1)`` exceeds the float range)."""
    if rounds == 0:
        return 0.0
    if epsilon > EXP_SAFE:
        return math.inf
    return epsilon * math.sqrt(2 * rounds * math.log(1 / delta)) + rounds * epsilon * math.expm1(epsilon)


def pld_composition(epsilon: float, rounds: int, delta: float, discretization: float = 1e-4) -> float:
    led = PrivacyLedger("replace_one", discretization)
    led.record(PureDpEvent(epsilon), rounds)
    return led.epsilon(delta)


def ldp_plan_report(epsilon: float, rounds: int, delta: float, sampling_rate: float = 1.0,
                    discretization: float = 1e-4) -> dict[str, Any]:
    """Per-message, basic, advanced and PLD totals (plus labelled sampled variants if ``q < 1``)."""
    PureDpEvent(epsilon)  # validates epsilon
    if not (isinstance(rounds, int) and not isinstance(rounds, bool) and 1 <= rounds <= MAX_EVENTS):
        raise ValueError(f"rounds must be a positive integer of at most {MAX_EVENTS}, got {rounds!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not 0 < sampling_rate <= 1:
        raise ValueError(f"sampling rate must be in (0, 1], got {sampling_rate}")
    out: dict[str, Any] = {
        "per_message": epsilon, "rounds": rounds, "delta": delta, "relation": "replace_one",
        "basic": rounds * epsilon, "advanced": advanced_composition(epsilon, rounds, delta),
        "pld": pld_composition(epsilon, rounds, delta, discretization), "sampling_rate": sampling_rate,
    }
    if sampling_rate < 1:
        q = sampling_rate
        expected = math.ceil(q * rounds)
        p99 = int(stats.binom.ppf(0.99, rounds, q))
        out["identified"] = {
            "threat_model": IDENTIFIED,
            "rounds_expected": expected, "pld_expected_rounds": pld_composition(epsilon, expected, delta, discretization),
            "rounds_p99": p99, "pld_p99_rounds": pld_composition(epsilon, p99, delta, discretization),
            "pld_all_rounds": out["pld"], "basic_all_rounds": out["basic"],
        }
        per_round = amplified_pure_epsilon(epsilon, q)
        out["amplified"] = {
            "threat_model": AMPLIFIED, "per_round": per_round, "basic": rounds * per_round,
            "advanced": advanced_composition(per_round, rounds, delta),
            **_amplified_total(epsilon, q, rounds, delta, discretization),
        }
    return out


def _amplified_total(epsilon: float, q: float, rounds: int, delta: float, discretization: float) -> dict[str, Any]:
    """PLD total of ``rounds`` Poisson(q)-subsampled ε-DP rounds; where the PLD exceeds the ledger's
    size limit, the exact optimal composition of the amplified pure ε (the event the PLD stands for)."""
    led = PrivacyLedger("replace_one", discretization)
    try:
        led.record(PoissonSampledEvent(q, PureDpEvent(epsilon)), rounds)
        return {"pld": led.epsilon(delta), "accountant": "pld"}
    except AccountingLimitError:
        return {"pld": pure_composition_epsilon(amplified_pure_epsilon(epsilon, q), rounds, delta),
                "accountant": "pure-kov"}
