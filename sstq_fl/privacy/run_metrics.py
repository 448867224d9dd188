"""A training run's ``metrics.json`` fields beside what its replayed transcripts give.

Each function returns checks ``(field, value in the metrics, value the transcripts give)``; the caller
(:func:`sstq_fl.privacy.replay.check_metrics`) refuses the first that disagrees.  The configuration
fields that set a guarantee (randomness mode, sampling rate, encoder, trust model, threat model) are
bound to the notes of the transcript's header; the amplified ε (Poisson participation, Balle, Barthe &
Gaboardi, NeurIPS 2018) is recomputed from the plan and those notes; the central ε of a trusted
shuffler (Feldman, McMillan & Talwar, SODA 2023) or curator from the central transcript.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .ldp import AMPLIFIED, capped_central_epsilon, ldp_plan_report
from .ledger import PrivacyLedger

Check = tuple[str, Any, Any]  # (the metrics field, its value, what the replayed transcript gives)
ABSENT = "<absent>"
CENTRAL_TRUSTS = ("shuffler", "curator", "secagg")


def training_checks(metrics: dict[str, Any], led: PrivacyLedger, delta: float) -> list[Check]:
    """A training run's ε-bearing fields beside what the ledger gives (final ε and δ, the plan, the rounds,
    per-message ε, each round's ε), then its configuration and amplified ε (:func:`config_checks`)."""
    final, cfg, rounds = metrics["final"], _object(metrics.get("config")), metrics["rounds"]
    planned = None if led.plan is None else sum(n for _, n in led.plan)
    checks: list[Check] = [("final.epsilon_total", final.get("epsilon_total", ABSENT), led.epsilon(delta)),
                           ("final.delta", final.get("delta", ABSENT), delta),
                           ("config.delta", cfg.get("delta", ABSENT), delta),
                           ("config.rounds", cfg.get("rounds", ABSENT), planned if planned is not None
                            else cfg.get("rounds")),
                           ("rounds (how many)", len(rounds), cfg.get("rounds") if led.complete else len(rounds))]
    for e in led.entries:
        if e.event.kind != "non_private":
            pure = e.event.pure_epsilon()
            checks.append(("config.epsilon (per message)", cfg.get("epsilon"), f"a {e.event.kind} event" if pure is None
                           else pure))
    return checks + round_checks(rounds, led, delta) + config_checks(metrics, led, delta)


def round_checks(rounds: list[dict[str, Any]], led: PrivacyLedger, delta: float) -> list[Check]:
    """The round of each charge (``meta.round``: increasing, one of the metrics' rounds) and each round's
    ``epsilon_spent`` beside the ε of the charges up to that round."""
    out: list[Check] = []
    last = 0
    for e in led.entries:
        t = e.meta.get("round")
        if isinstance(t, int) and not isinstance(t, bool) and last < t <= len(rounds):
            out.append(("rounds (the round of a charge)", t, t))
            last = t
        else:
            out.append(("rounds (the round of a charge)", t, f"a round in {last + 1}..{len(rounds)}"))
    for i, eps in enumerate(running_epsilons(led, len(rounds), lambda sub, _t: sub.epsilon(delta))):
        out.append((f"rounds[{i}].epsilon_spent", rounds[i].get("epsilon_spent", ABSENT), eps))
    return out


def running_epsilons(led: PrivacyLedger, rounds: int, figure: Any) -> list[float]:
    """``figure(ledger of the charges up to round t, t)`` for t = 1..rounds (charges name their round in ``meta``)."""
    out, k, done = [], 0, {}
    for t in range(1, rounds + 1):
        while k < len(led.entries) and led.entries[k].meta.get("round") == t:
            k += 1
        if k not in done:
            done[k] = figure(PrivacyLedger(led.relation, led.discretization, led.entries[:k]), t)
        out.append(done[k])
    return out


def config_checks(metrics: dict[str, Any], led: PrivacyLedger, delta: float) -> list[Check]:
    """The randomness mode, sampling rate, encoder, trust and threat model beside the transcript's notes, and
    ``final.epsilon_amplified`` beside its recomputation (absent at sampling rate 1)."""
    final, cfg, notes = metrics["final"], _object(metrics.get("config")), led.notes
    checks: list[Check] = [
        ("randomness.mode", _object(metrics.get("randomness")).get("mode", ABSENT), notes.get("randomness", ABSENT)),
        ("config.randomness", cfg.get("randomness", ABSENT), notes.get("randomness", ABSENT)),
        ("config.sampling_rate", cfg.get("sampling_rate", ABSENT), notes.get("sampling_rate", ABSENT)),
        ("config.encoder", cfg.get("encoder", ABSENT), notes.get("encoder_config", ABSENT)),
        ("final.encoder_spec", final.get("encoder_spec", ABSENT), notes.get("encoder", ABSENT)),
        ("config.trust", cfg.get("trust", ABSENT), notes.get("trust", ABSENT)),
        ("final.epsilon_threat_model", final.get("epsilon_threat_model", ABSENT), notes.get("threat_model", ABSENT))]
    return checks + amplified_checks(final, led, delta)


def amplified_checks(final: dict[str, Any], led: PrivacyLedger, delta: float) -> list[Check]:
    """``final.epsilon_amplified``: absent at sampling rate 1; ε ``None`` unless randomness is secure (the seed
    names the participants); else the PLD of the plan's rounds, each Poisson-subsampled at the sampling rate."""
    q, amp = led.notes.get("sampling_rate"), final.get("epsilon_amplified", ABSENT)
    if not isinstance(q, int | float) or isinstance(q, bool) or q >= 1:
        return [("final.epsilon_amplified", amp, ABSENT)]
    got = _object(amp)
    if led.notes.get("randomness") != "secure":
        return [("final.epsilon_amplified.epsilon", got.get("epsilon", ABSENT), None)]
    eps0 = led.plan[0][0].pure_epsilon() if led.plan else None
    if eps0 is None or led.plan is None:
        return [("final.epsilon_amplified.epsilon", got.get("epsilon", ABSENT), "no plan of one pure-epsilon event")]
    rep = ldp_plan_report(eps0, sum(n for _, n in led.plan), delta, float(q), led.discretization)
    return [("final.epsilon_amplified.epsilon", got.get("epsilon", ABSENT), rep["amplified"]["pld"]),
            ("final.epsilon_amplified.threat_model", got.get("threat_model", ABSENT), AMPLIFIED)]


def central_checks(metrics: dict[str, Any], led: PrivacyLedger, central: PrivacyLedger | None,
                   delta: float) -> list[Check]:
    """``final.epsilon_central`` and each round's ``epsilon_central`` beside the central transcript's replay
    (a shuffler's figure capped by the local ε of a client in every round so far); absent without a trust model."""
    final, rounds = metrics["final"], metrics["rounds"]
    if central is None:
        return [("final.epsilon_central", final.get("epsilon_central", ABSENT), ABSENT),
                *((f"rounds[{i}].epsilon_central", r.get("epsilon_central", ABSENT), ABSENT)
                  for i, r in enumerate(rounds))]
    eps0 = led.plan[0][0].pure_epsilon() if led.plan else None
    shuffled = led.notes.get("trust") == "shuffler"

    def figure(sub: PrivacyLedger, t: int) -> float:
        if shuffled and eps0 is not None:
            return capped_central_epsilon(sub, eps0, t, delta)
        with np.errstate(over="ignore"):
            return sub.epsilon(delta)

    got = _object(final.get("epsilon_central"))
    per_round = running_epsilons(central, len(rounds), figure)
    return [("final.epsilon_central.epsilon", got.get("epsilon", ABSENT), per_round[-1] if per_round else 0.0),
            ("final.epsilon_central.delta", got.get("delta", ABSENT), delta),
            ("final.epsilon_central.threat_model", got.get("threat_model", ABSENT), central.notes.get("threat_model")),
            ("final.epsilon_central (run id)", central.run_id, led.run_id),
            *((f"rounds[{i}].epsilon_central", r.get("epsilon_central", ABSENT), e)
              for i, (r, e) in enumerate(zip(rounds, per_round)))]


def _object(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}
