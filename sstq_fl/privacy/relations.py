"""Runs on one data set under different neighbouring relations, composed into one ε under replace-one.

Under ``add_or_remove_one`` two data sets are neighbours when one holds one record more than the other;
under ``replace_one`` when they have the same size and differ in one record's value.

**Replace-one is the relation every run can be stated under.**  A replacement ``x → x'`` is a removal
``x → x⁻`` followed by an addition ``x⁻ → x'``.  So a mechanism ``(ε, δ)``-DP under add/remove has, for every
output set ``S``, ``P[M(x) ∈ S] ≤ e^ε P[M(x⁻) ∈ S] + δ ≤ e^{2ε} P[M(x') ∈ S] + (1 + e^ε) δ``: it is
``(2ε, (1 + e^ε) δ)``-DP under replace-one, group privacy for groups of ``k = 2`` (Dwork & Roth, "The
Algorithmic Foundations of Differential Privacy", 2014, Thm. 2.2, and its ``(ε, δ)`` form, this chain).  The
converse fails: a replace-one mechanism with a public record count ``N_decl`` (a mean over ``N_decl``, as
DP-MEPF's) is defined on data sets of that size only and says nothing about one with a record more or fewer.
A data set's ε under add/remove therefore exists only when every run on it was add/remove
(:data:`ADD_OR_REMOVE_UNAVAILABLE` says why otherwise).

**Exact where the accountant allows.**  An event states its mechanism, not the relation (the ledger's; only
the pure and approximate DP events state one), so an add/remove run whose events all have a replace-one PLD is
re-accounted under replace-one exactly (``"exact"``):

* the Gaussian mechanism ``f(x) + N(0, σ²C²I)`` with add/remove sensitivity ``C``: through ``x⁻``,
  ``‖f(x) − f(x')‖ ≤ 2C`` by the triangle inequality, and dp-accounting's replace-one Gaussian is the shift
  ``2C`` (``GaussianEvent(σ)`` under replace-one is ``GaussianEvent(σ/2)`` under add/remove);
* the Poisson-subsampled Gaussian (DP-SGD): the replaced record is in the batch with probability ``q`` on both
  data sets and the rest of the batch is common post-processing, so the pair is ``(1−q)N(0, σ²) + qN(a, σ²)``
  against ``(1−q)N(0, σ²) + qN(b, σ²)`` with ``‖a‖, ‖b‖ ≤ C``, dp-accounting's replace pair taking ``b = −a``
  on one axis (the tests check it against quadrature, and that other pairs in the plane give less).

**Group privacy otherwise** (``"group privacy (k = 2)"``, e.g. a Laplace release, which the accountant has only
under add/remove): the run's add/remove PLD gives ``ε_i`` at a ``δ_i``, and ``(2ε_i, (1 + e^{ε_i}) δ_i)`` joins the
composition as an :class:`~.events.ApproxDpEvent`, the PLD of a generic ``(ε, δ)`` mechanism, so that everything
composes on one PLD.  Of the reported ``δ``, :data:`GROUP_DELTA_SHARE` is shared equally by these entries'
``(1 + e^{ε_i}) δ_i`` (a run that is pure needs none: ``2ε_i``-DP), ``δ_i`` the largest of ``share · 2^{−j}``
that fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import AccountingLimitError, UnsupportedEventError
from .events import ApproxDpEvent, NonPrivateEvent, PrivacyEvent, PureDpEvent
from .floats import EXP_SAFE
from .ledger import PrivacyLedger

Plan = Sequence[tuple[PrivacyEvent, int]]
REPLACE, ADD_OR_REMOVE = "replace_one", "add_or_remove_one"
RECORDED, EXACT, GROUP = "recorded", "exact", "group privacy (k = 2)"
GROUP_DELTA_SHARE = 0.5  # of the reported δ, for the group-privacy entries' δ terms (our choice)
ADD_OR_REMOVE_UNAVAILABLE = ("not available: a replace-one run read this data set, and a replace-one guarantee "
                             "(a fixed record count N_decl) implies none under add/remove")


@dataclass(frozen=True)
class Run:
    """One run's private events and the relation they were accounted under."""

    relation: str
    plan: Plan


@dataclass(frozen=True)
class Combined:
    """The data set's ε over its runs: ``relation`` is the one reported (add/remove when every run was, else
    replace-one) and ``epsilon`` the ε under it; ``methods`` says per run how it is stated under replace-one."""

    relation: str
    epsilon: float
    epsilon_replace_one: float | None
    epsilon_add_or_remove_one: float | None
    methods: tuple[str, ...]


def compose(relation: str, plan: Plan, delta: float) -> float:
    """ε at ``delta`` of every ``(event, count)`` in ``plan`` composed under ``relation`` (PLD; ``inf`` with a
    non-private event)."""
    return _ledger(relation, plan).epsilon(delta)


def _ledger(relation: str, plan: Plan) -> PrivacyLedger:
    led = PrivacyLedger(relation)
    for ev, n in plan:
        led.record(ev, n)
    return led


def group_privacy(epsilon: float, delta: float) -> tuple[float, float]:
    """``(2ε, (1 + e^ε) δ)``: an add/remove ``(ε, δ)`` guarantee under replace-one (see the module docstring);
    the δ is ``inf`` where ``e^ε`` overflows."""
    if not delta:
        return 2 * epsilon, 0.0
    return 2 * epsilon, (1 + math.exp(epsilon)) * delta if epsilon <= EXP_SAFE else math.inf


def method(run: Run) -> str:
    """How ``run`` is stated under replace-one: :data:`RECORDED`, :data:`EXACT` (every event has a replace-one
    PLD within the accounting limits) or :data:`GROUP`."""
    if run.relation == REPLACE:
        return RECORDED
    try:
        _ledger(REPLACE, run.plan)
    except (UnsupportedEventError, AccountingLimitError):
        return GROUP
    return EXACT


def group_event(plan: Plan, share: float) -> PrivacyEvent:
    """The replace-one event standing for the add/remove ``plan`` by group privacy: ``PureDpEvent(2ε)`` when the
    plan is pure ε-DP, else ``ApproxDpEvent(2ε_i, (1 + e^{ε_i}) δ_i)`` with ``δ_i`` the largest ``share · 2^{−j}``
    (``j ≤ 60``) whose converted δ is at most ``share``; a non-private event when none is finite."""
    led = _ledger(ADD_OR_REMOVE, plan)
    pure = led.epsilon(0.0)
    if math.isfinite(pure) and pure > 0:
        return PureDpEvent(2 * pure, REPLACE)
    for j in range(1, 61):
        eps, delta = group_privacy(led.epsilon(share * 2.0**-j), share * 2.0**-j)
        if not math.isfinite(eps):
            break
        if delta <= share:
            return ApproxDpEvent(eps, delta, REPLACE)
    return NonPrivateEvent(f"no finite group-privacy bound at delta <= {share:g}")


def as_replace_one(runs: Sequence[Run], delta: float) -> tuple[float, tuple[str, ...]]:
    """ε at ``delta`` of every run stated under replace-one and composed on one PLD, and each run's method."""
    methods = tuple(method(r) for r in runs)
    group = [r.plan for r, m in zip(runs, methods, strict=True) if m == GROUP]
    impure = sum(not math.isfinite(_ledger(ADD_OR_REMOVE, p).epsilon(0.0)) for p in group)
    share = GROUP_DELTA_SHARE * delta / max(impure, 1)
    pool = [(ev, n) for r, m in zip(runs, methods, strict=True) if m != GROUP for ev, n in r.plan]
    pool += [(group_event(p, share), 1) for p in group]
    return compose(REPLACE, pool, delta), methods


def combine(runs: Sequence[Run], delta: float, both: bool = True) -> Combined:
    """The data set's ε at ``delta`` over ``runs`` (at least one): under add/remove when every run was (and, with
    ``both``, also under replace-one), else under replace-one with add/remove unavailable."""
    if not runs:
        raise ValueError("no runs to combine")
    relations = {r.relation for r in runs}
    every = [(ev, n) for r in runs for ev, n in r.plan]
    if relations == {REPLACE}:
        eps = compose(REPLACE, every, delta)
        return Combined(REPLACE, eps, eps, None, (RECORDED,) * len(runs))
    if relations == {ADD_OR_REMOVE}:
        eps = compose(ADD_OR_REMOVE, every, delta)
        ro, methods = as_replace_one(runs, delta) if both else (None, ())
        return Combined(ADD_OR_REMOVE, eps, ro, eps, methods)
    ro, methods = as_replace_one(runs, delta)
    return Combined(REPLACE, ro, ro, None, methods)
