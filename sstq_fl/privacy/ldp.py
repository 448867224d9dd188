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

With a trusted shuffler (``shuffle = n`` messages a round, one per client, published in random
order without sender identities) a third figure, ``shuffled``, is the central guarantee against
the analyst who sees only the shuffled messages: each round is a
:class:`~sstq_fl.privacy.events.ShuffledLdpEvent` (the stronger-clone dominating pair of Feldman,
McMillan & Talwar, SODA 2023) and ``T`` rounds compose by PLD, for a client that takes part in every
round (participation sampling is not combined with it).  The closed form of Feldman, McMillan &
Talwar (FOCS 2021, Thm. 3.1) for one round is printed beside it where it applies.

Large ε is answered, not crashed on: a figure that exceeds the float range (``e^ε`` in the
advanced bound for ε ≳ 709) is ``inf``.  At most :data:`~sstq_fl.privacy.errors.MAX_EVENTS`
rounds are accepted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import MAX_EVENTS, AccountingLimitError
from .events import PoissonSampledEvent, PureDpEvent, ShuffledLdpEvent
from .floats import EXP_SAFE
from .ledger import PrivacyLedger
from .pure_composition import amplified_pure_epsilon, pure_composition_epsilon
from .shuffle import fmt21_closed_form

IDENTIFIED = ("server sees which client sent each message: no amplification from sampling; "
              "composition over the rounds the client actually joined")
AMPLIFIED = ("observer does not learn whether a client took part in a round (aggregate-only or anonymised/shuffled "
             "messages, an absent client indistinguishable from one encoding a public null input); Poisson "
             "participation with rate q")
SHUFFLED = ("trusted shuffler: the analyst sees each round's messages in random order without sender identities; "
            "central guarantee for a client in every round (no participation sampling)")


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


MIN_EPSILON = 1e-12
"""The smallest per-message ε planned or charged: ``1e-8`` of the PLD accountant's default discretisation
interval (1e-4), far below any useful ε; a subnormal ε (``1e-320``) composed to "PLD 0"."""


def ldp_plan_report(epsilon: float, rounds: int, delta: float, sampling_rate: float = 1.0,
                    discretization: float = 1e-4, shuffle: int | None = None) -> dict[str, Any]:
    """Per-message, basic, advanced and PLD totals (plus labelled sampled variants if ``q < 1``, and
    the central figure under a shuffler of ``shuffle`` messages a round)."""
    PureDpEvent(epsilon)  # validates epsilon
    if not epsilon >= MIN_EPSILON:
        raise ValueError(f"--ldp-epsilon must be at least {MIN_EPSILON:g} (below it the PLD accountant's grid cannot "
                         f"represent the loss), got {epsilon!r}")
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
        from scipy import stats

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
    if shuffle is not None:
        out["shuffled"] = shuffled_report(epsilon, rounds, delta, shuffle, discretization)
    return out


def shuffled_epsilon(epsilon: float, messages: int, rounds: int, delta: float, discretization: float = 1e-4) -> float:
    """Central ε at ``δ`` of ``rounds`` rounds of ``messages`` shuffled ε-LDP messages: the PLD of the rounds'
    :class:`~sstq_fl.privacy.events.ShuffledLdpEvent` s, capped by the local figure (the shuffled messages are a
    post-processing of the identified ones, so the local guarantee holds for them too; dp-accounting's ε search
    overflows to ``inf`` near ε ≈ 700, where the local figure is the answer)."""
    led = PrivacyLedger("replace_one", discretization)
    led.record(ShuffledLdpEvent(epsilon, messages), rounds)
    return capped_central_epsilon(led, epsilon, rounds, delta)


def capped_central_epsilon(ledger: PrivacyLedger, epsilon: float, rounds: int, delta: float) -> float:
    """``ledger``'s ε at ``δ`` (its shuffled rounds), capped by the local ε of ``rounds`` ε-LDP messages."""
    if not rounds:
        return 0.0
    with np.errstate(over="ignore"):
        central = ledger.epsilon(delta)
    return min(central, pure_composition_epsilon(epsilon, rounds, delta))


def shuffled_report(epsilon: float, rounds: int, delta: float, messages: int, discretization: float = 1e-4) -> dict[str, Any]:
    """Central ε of ``rounds`` rounds of ``messages`` shuffled ε-LDP messages (see the module)."""
    return {"threat_model": SHUFFLED, "messages": messages, "event": ShuffledLdpEvent(epsilon, messages).to_json(),
            "per_round": shuffled_epsilon(epsilon, messages, 1, delta, discretization),
            "pld": shuffled_epsilon(epsilon, messages, rounds, delta, discretization),
            "per_round_fmt21_closed_form": fmt21_closed_form(epsilon, messages, delta)}


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


def plan_lines(rep: dict[str, Any]) -> list[str]:
    """The report of :func:`ldp_plan_report` as the lines ``sstq-fl privacy plan`` prints."""
    q = rep["sampling_rate"]
    who = "full participation" if q >= 1 else f"sampling rate q = {q:g}, for a client that joins all of them (worst case)"
    out = [f"per message: epsilon = {rep['per_message']:g} (pure, replace-one)",
           f"{rep['rounds']} rounds, {who}, at delta = {rep['delta']:g}:",
           f"  basic {rep['basic']:.4g}   advanced {rep['advanced']:.4g}   PLD {rep['pld']:.4g}"]
    if "identified" in rep:
        idf, amp = rep["identified"], rep["amplified"]
        how = "PLD" if amp.get("accountant", "pld") == "pld" else "exact (pure-eps optimal composition)"
        out += [f"sampling rate q = {q:g}:", f"  [{idf['threat_model']}]",
                f"    PLD over {idf['rounds_expected']} rounds (expected) {idf['pld_expected_rounds']:.4g}; "
                f"{idf['rounds_p99']} rounds (99th pct) {idf['pld_p99_rounds']:.4g}; all rounds {idf['pld_all_rounds']:.4g}",
                f"  [{amp['threat_model']}]", f"    per round {amp['per_round']:.4g}; {how} total {amp['pld']:.4g}"]
    if "shuffled" in rep:
        sh = rep["shuffled"]
        closed = sh["per_round_fmt21_closed_form"]
        out += [f"shuffled, {sh['messages']} messages a round (central epsilon):", f"  [{sh['threat_model']}]",
                f"    per round {sh['per_round']:.4g}" + ("" if closed is None else f" (FMT21 closed form {closed:.4g})")
                + f"; PLD total {sh['pld']:.4g}"]
    return out
