"""What a resumed run takes from its folder: the checkpoint's round records without their accounting
figures, and the ledgers as the replay of the whole hash-chained transcripts, checked against the rounds
the checkpoint claims.

A checkpoint holds no ε: each round's ``epsilon_spent`` (and with a trusted stage ``epsilon_central``,
``messages_central``) is recomputed from the replayed charges.  Round ``t``'s figure is the
ledger just after round ``t``'s last charge, in transcript order (the charges are written before the
messages leave, so a charge may precede a checkpoint that never recorded its round: it stays).

The prefix a checkpoint names must cover exactly the rounds it claims.  Reproducible mode: its charges are
those the seed implies for rounds ``1..t`` (the busiest client's new messages, one line per round in which
the maximum grew).  Secure mode: every charge names a round ``≤ t`` that had participants, at most one message
each, and with full participation every round ``1..t`` is charged once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..privacy.errors import short_repr
from ..privacy.ledger import PrivacyLedger
from ..privacy.transcript import Entry
from .round_draws import participates

ACCOUNTING = ("epsilon_spent", "epsilon_central", "messages_central")
"""The per-round figures that come from the ledgers, never from a checkpoint."""


def saved_rounds(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The round records as a checkpoint keeps them: without :data:`ACCOUNTING`."""
    return [{k: v for k, v in r.items() if k not in ACCOUNTING} for r in rounds]


def round_of(e: Entry) -> Any:
    """The round a charge names (``meta.round``)."""
    return e.meta.get("round")


def seeded_charges(cfg: Any, rounds: int) -> list[tuple[int, int]]:
    """Reproducible mode: ``(round, count)`` of every charge rounds ``1..rounds`` make (the busiest client's
    messages, charged where the maximum grows)."""
    joins, out, top = np.zeros(cfg.clients, np.int64), [], 0
    for t in range(1, rounds + 1):
        joins += participates(cfg.seed, t, cfg.clients, cfg.sampling_rate, cfg.randomness)
        busiest = int(joins.max(initial=0))
        if busiest > top:
            out.append((t, busiest - top))
            top = busiest
    return out


def check_prefix(cfg: Any, entries: list[Entry], ck: dict[str, Any], path: Path) -> None:
    """Refuse (one line) a prefix whose charges are not those of the checkpoint's rounds (module docstring)."""
    t, got = ck["round"], [(round_of(e), e.count) for e in entries]
    late = [r for r, _ in got if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= t]
    if late:
        raise ValueError(f"--resume: {path} charges round {short_repr(late[0])}, not one of the checkpoint's {t} rounds")
    if cfg.randomness == "reproducible" and cfg.engine == "vectorized":
        want = seeded_charges(cfg, t)
        if got != want:
            raise ValueError(f"--resume: {path}'s prefix charges {sum(n for _, n in got)} message(s) in rounds "
                             f"{sorted({r for r, _ in got})}, not the {sum(n for _, n in want)} its {t} rounds sent")
        return
    busy = {int(r["round"]) for r in ck["rounds"] if r.get("clients")}
    full = cfg.sampling_rate >= 1 and cfg.engine == "vectorized"
    rounds = [r for r, _ in got]
    if any(n != 1 for _, n in got) or len(set(rounds)) != len(rounds) or not set(rounds) <= busy or \
            (full and set(rounds) != set(range(1, t + 1))):
        raise ValueError(f"--resume: {path}'s prefix charges rounds {sorted(set(rounds))} ({sum(n for _, n in got)} "
                         f"message(s)), which the checkpoint's {t} rounds of participants do not imply")


def check_plan(cfg: Any, entries: list[Entry], ck: dict[str, Any], path: Path) -> None:
    """Secure mode: refuse (one line) a resume whose remaining rounds could charge the busiest client past the
    plan (``cfg.rounds`` messages): every round after the checkpoint charges at most one more message, and a
    round charged after the checkpoint (sent, then rolled back or interrupted) is charged again when re-sent.
    Refused before anything of the resumed run is encoded or sent."""
    if cfg.randomness != "secure":
        return  # reproducible mode charges a re-sent round's same messages once: the seed's count fits the plan
    t, charged = ck["round"], sum(e.count for e in entries)
    if charged + cfg.rounds - t > cfg.rounds:
        over = t + cfg.rounds - charged + 1
        raise ValueError(f"--resume: round {over} would charge message {cfg.rounds + 1} of the planned {cfg.rounds}: "
                         f"{path} charges {charged} for the checkpoint's {t} rounds (a round sent after it is charged "
                         f"again when re-sent)")


def epsilon_by_round(led: PrivacyLedger, rounds: int, delta: float, figure: Any = None) -> list[float]:
    """Each round ``1..rounds``'s ε: of the ledger's entries up to the last one naming a round ``≤ r``, in order
    (``figure(ledger, r)``: another reading of that ledger, e.g. a shuffler's capped ε)."""
    out, k, cache = [], 0, {}
    for r in range(1, rounds + 1):
        for i in range(k, len(led.entries)):
            rr = round_of(led.entries[i])
            if isinstance(rr, int) and rr <= r:
                k = i + 1
        if (k, r if figure else 0) not in cache:
            part = PrivacyLedger(led.relation, led.discretization, led.entries[:k])
            cache[(k, r if figure else 0)] = part.epsilon(delta) if figure is None else figure(part, r)
        out.append(cache[(k, r if figure else 0)])
    return out
