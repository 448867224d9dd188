"""An independent Rényi-DP figure for a ledger's events.

Each event maps itself onto dp-accounting's ``DpEvent`` (:meth:`PrivacyEvent.rdp`, add-or-remove
semantics); dp-accounting's RDP accountant composes RDP additively over orders (Mironov, CSF 2017,
Prop. 1) and converts to ``(ε, δ)`` (Canonne, Kamath & Steinke, NeurIPS 2020, Prop. 12).  A
ledger of pure-ε events only (an LDP training run) is answered in closed form by
:func:`zcdp_epsilon`, without importing dp-accounting (0.9 s of a short run's start-up).  The
figure is a cross-check of the PLD and exact pure accountants, never the reported ε.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .events.base import PrivacyEvent

# Orders α of the closed-form conversion: α − 1 on a log grid from 10^-2 to 10^8 (ratio 1.0046 between
# neighbours), wider and finer than dp-accounting's default orders (1.1 … 1024).
ZCDP_ORDERS = 1 + np.logspace(-2, 8, 5001)


def zcdp_epsilon(rho: float, delta: float) -> float | None:
    """ε at ``delta`` of a ``rho``-zCDP mechanism, or ``None`` where ``rho`` is not finite.

    ρ-zCDP is RDP ``ρα`` at every order ``α > 1`` (Bun & Steinke, TCC 2016, Def. 1.1), converted
    by ``ε = min_α ρα + log(1 − 1/α) − log(δα)/(α − 1)`` (Canonne, Kamath & Steinke, NeurIPS 2020,
    Prop. 12) over :data:`ZCDP_ORDERS`.  It is ``0`` where ``δ² ≥ 1 − e^{−ρ}``: the KL divergence is
    at most ``ρ``, so the total variation distance, the least δ at ε = 0, is at most
    ``√(1 − e^{−ρ})`` (Bretagnolle & Huber, 1979)."""
    if not math.isfinite(rho) or not 0 <= delta < 1:  # no figure for a δ outside [0, 1) (NaN included)
        return None
    if rho == 0:
        return 0.0
    if delta == 0:
        return math.inf
    if delta**2 + math.expm1(-rho) >= 0:
        return 0.0
    with np.errstate(over="ignore"):
        i = int(np.argmin(_conversion(rho, delta, ZCDP_ORDERS)))
    lo, hi = ZCDP_ORDERS[max(i - 1, 0)], ZCDP_ORDERS[min(i + 1, ZCDP_ORDERS.size - 1)]
    grid_min = float(_conversion(rho, delta, ZCDP_ORDERS[i]))
    return max(0.0, min(grid_min, _golden_min(lambda a: float(_conversion(rho, delta, a)), lo, hi)))


def _conversion(rho: float, delta: float, a: Any) -> Any:
    """``ρα + log(1 − 1/α) − log(δα)/(α − 1)`` at orders ``a`` (a float or an array)."""
    return rho * a + np.log1p(-1 / a) - np.log(delta * a) / (a - 1)


def _golden_min(f: Callable[[float], float], lo: float, hi: float, steps: int = 80) -> float:
    """The least value of ``f`` found by golden-section search on ``[lo, hi]`` (``f`` unimodal there:
    the bracket of a grid minimum), never above ``f`` at the bracket's midpoint."""
    g = (math.sqrt(5) - 1) / 2
    best = f(0.5 * (lo + hi))
    for _ in range(steps):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        fa, fb = f(a), f(b)
        lo, hi = (lo, b) if fa < fb else (a, hi)
        best = min(best, fa, fb)
    return best


def pure_rho(events: Iterable[tuple[PrivacyEvent, int]]) -> float | None:
    """``ρ = Σ count · ε²/2`` when every event is pure ε-DP (an ε-DP mechanism is ``ε²/2``-zCDP, Bun &
    Steinke, TCC 2016, Prop. 1.4; zCDP composes additively, their Lemma 1.7), else ``None``."""
    rho = 0.0
    for event, count in events:
        eps = event.pure_epsilon()
        if eps is None:
            return None
        rho += count * (eps * eps / 2)
    return rho


def rdp_epsilon(events: Iterable[tuple[PrivacyEvent, int]], relation: str, delta: float) -> float | None:
    """ε at ``delta`` of ``count`` runs of each ``(event, count)`` under ``relation`` by RDP, or
    ``None`` where an event has no RDP form or the figure overflows."""
    events = list(events)
    rho = pure_rho(events)
    if rho is not None:
        return zcdp_epsilon(rho, delta)
    import dp_accounting

    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    try:
        for event, count in events:
            acc.compose(event.rdp(relation), count)
        return float(acc.get_epsilon(delta))
    except (ValueError, ArithmeticError):  # unsupported events; ε so large that ε² overflows
        return None


# Orders of the RDP-curve accountant: the closed form's log grid and every integer order 2 … 1024 (bounds
# such as the Skellam mechanism's hold at integer orders only and are infinite elsewhere).
CURVE_ORDERS = np.unique(np.concatenate([ZCDP_ORDERS, np.arange(2, 1025, dtype=float)]))


def composed_curve(events: Iterable[tuple[PrivacyEvent, int]], relation: str) -> np.ndarray:
    """``Σ count · ε_event(α)`` at :data:`CURVE_ORDERS`: RDP composes additively at each order (Mironov, CSF
    2017, Prop. 1); an event without a curve refuses (:meth:`PrivacyEvent.rdp_curve`)."""
    total = np.zeros_like(CURVE_ORDERS)
    for event, count in events:
        if count:
            total += count * np.asarray(event.rdp_curve(relation, CURVE_ORDERS), dtype=float)
    return total


def curve_epsilon(curve: np.ndarray, delta: float) -> float:
    """The least ``ε`` at ``delta`` of an RDP curve at :data:`CURVE_ORDERS`:
    ``min_α ε(α) + log(1 − 1/α) − log(δα)/(α − 1)`` (Canonne, Kamath & Steinke, NeurIPS 2020, Prop. 12)."""
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    if not np.any(curve):
        return 0.0
    if delta == 0:
        return math.inf
    with np.errstate(over="ignore", invalid="ignore"):
        eps = curve + np.log1p(-1 / CURVE_ORDERS) - np.log(delta * CURVE_ORDERS) / (CURVE_ORDERS - 1)
    eps = eps[np.isfinite(eps)]
    return max(0.0, float(eps.min())) if eps.size else math.inf


def curve_delta(curve: np.ndarray, epsilon: float) -> float:
    """The least ``δ`` at ``epsilon`` of an RDP curve, by the same conversion solved for δ:
    ``min_α exp((α − 1)(ε(α) − ε + log(1 − 1/α))) / α``, at most 1."""
    if not np.any(curve):
        return 0.0
    a = CURVE_ORDERS
    with np.errstate(over="ignore", invalid="ignore"):
        log_delta = (a - 1) * (curve - epsilon + np.log1p(-1 / a)) - np.log(a)
    log_delta = log_delta[np.isfinite(log_delta)]
    return float(min(1.0, math.exp(min(0.0, float(log_delta.min()))))) if log_delta.size else 1.0
