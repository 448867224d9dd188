"""Calibration by bisection over the ledger (as ``dp_accounting.calibrate_dp_mechanism`` does,
but over this ledger's events so that pure-ε and relation handling are the ledger's own).

A candidate whose composition exceeds the ledger's accounting limits
(:class:`~sstq_fl.privacy.errors.AccountingLimitError`: a privacy loss too large to
discretise) is treated as over the target, so the search moves towards more noise (smaller
per-message ε), never towards an unaccountable answer."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from .errors import AccountingLimitError
from .events import PoissonSampledEvent, PrivacyEvent, PureDpEvent
from .ledger import PrivacyLedger

PlanFn = Callable[[float], Sequence[tuple[PrivacyEvent, int]]]


def plan_epsilon(plan: Sequence[tuple[PrivacyEvent, int]], delta: float, relation: str) -> float:
    """The ledger's ε at ``delta`` of ``plan`` alone (``inf`` for a non-private one, ``0`` for an empty one): what a
    pipeline reports as one stage's certified ε."""
    led = PrivacyLedger(relation)
    for ev, n in plan:
        led.record(ev, n)
    return led.epsilon(delta) if plan else 0.0


def _epsilon(plan: Sequence[tuple[PrivacyEvent, int]], delta: float, relation: str, interval: float) -> float:
    """ε of ``plan`` at ``delta``; ``inf`` where the ledger refuses it as too large to account."""
    led = PrivacyLedger(relation, interval)
    try:
        for ev, n in plan:
            led.record(ev, n)
        return led.epsilon(delta)
    except AccountingLimitError:
        return math.inf


def calibrate_noise_multiplier(target_epsilon: float, delta: float, plan: PlanFn, relation: str = "replace_one",
                               interval: float = 1e-4, tol: float = 1e-3) -> float:
    """Smallest noise multiplier ``σ`` (to relative ``tol``) with ``ε(plan(σ)) ≤ target``.

    ``plan(σ)`` returns the run's events for noise multiplier ``σ``; ε decreases in ``σ``.
    The search runs on a 10x coarser PLD grid first (pessimistic, so its answer is
    feasible), then refines on the ledger's grid just below it.
    """
    if not target_epsilon > 0:
        raise ValueError(f"target epsilon must be positive, got {target_epsilon}")

    def ok_at(grid: float) -> Callable[[float], bool]:
        return lambda sigma: _epsilon(plan(sigma), delta, relation, grid) <= target_epsilon

    coarse = ok_at(min(10 * interval, 1e-2))
    low, high = 1.0, 1.0
    if coarse(1.0):
        while coarse(low):
            high, low = low, low / 2
            if low < 1e-4:
                return high
    else:
        while not coarse(high):
            low, high = high, high * 2
            if high > 1e6:
                raise ValueError(f"no noise multiplier up to 1e6 reaches epsilon={target_epsilon} at delta={delta}")
    high = _geometric_bisect(coarse, low, high, tol)
    fine = ok_at(interval)
    low = high / (1 + 20 * tol)
    if fine(low):
        return low
    return _geometric_bisect(fine, low, high, tol)


def _geometric_bisect(ok: Callable[[float], bool], low: float, high: float, tol: float) -> float:
    """Given ``ok(high)`` and not ``ok(low)``, shrink to ``high/low ≤ 1 + tol``; return ``high``."""
    while high / low > 1 + tol:
        mid = (low * high) ** 0.5
        if ok(mid):
            high = mid
        else:
            low = mid
    return high


def calibrate_ldp_epsilon(target_total: float, delta: float, rounds: int, sampling_rate: float = 1.0,
                          amplified: bool = False, interval: float = 1e-4, tol: float = 1e-4) -> float:
    """Largest per-message ε whose ``rounds``-fold PLD composition stays ≤ ``target_total``.

    With ``amplified=True`` the rounds are Poisson(``sampling_rate``)-subsampled (see
    :mod:`sstq_fl.privacy.ldp` for the threat model this assumes).
    """
    if not target_total > 0:
        raise ValueError(f"target epsilon must be positive, got {target_total}")

    def total(eps: float) -> float:
        ev: PrivacyEvent = PureDpEvent(eps)
        if amplified and sampling_rate < 1:
            ev = PoissonSampledEvent(sampling_rate, ev)
        return _epsilon([(ev, rounds)], delta, "replace_one", interval)

    low = target_total / rounds  # feasible: PLD composition never exceeds basic composition
    while total(low) > target_total:  # (only possible through discretisation error)
        low /= 2
    high = 2 * low
    while total(high) <= target_total:
        low, high = high, high * 2
        if high > 1e4:
            return low
    while high - low > tol * max(low, 1e-6):
        mid = 0.5 * (low + high)
        if total(mid) <= target_total:
            low = mid
        else:
            high = mid
    return low
