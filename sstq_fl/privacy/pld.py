"""Privacy-loss distributions (PLD) from dp-accounting, built and composed under size limits.

The PLD of a mechanism is the distribution of its privacy loss ``log(P(o)/Q(o))`` for ``o``
drawn from the output distribution ``P`` on one of two neighbouring inputs; composition is
convolution of PLDs, and ``δ(ε) = E[(1 − e^{ε−L})₊]`` (Meiser & Mohammadi, CCS 2018;
Koskela, Jälkö & Honkela, AISTATS 2020, who compute it by FFT).  dp-accounting discretises the loss on a grid of
spacing ``interval`` with pessimistic rounding (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi,
PETS 2022), so every PLD built here over-estimates ``δ(ε)``.

Limits (each refused with a one-line :class:`AccountingLimitError`, never a crash or a hang):
no PLD of more than :data:`MAX_PLD_POINTS` grid points (checked before it is built, from
dp-accounting's own Chernoff truncation bounds), nor more than :data:`MAX_PLD_WORK` points
built and composed in all inside one :func:`work_budget` block.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np

from .errors import AccountingLimitError
from .floats import EXP_SAFE

if TYPE_CHECKING:  # dp-accounting is imported where a PLD is built, as scipy is where used: each takes about a second
    import dp_accounting
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

MAX_PLD_POINTS = 2**24  # grid points of any privacy-loss distribution the ledger builds (~130 MB each)
MAX_PLD_WORK = 2**25  # grid points built and composed in all, per composition and per ledger's validations (~1 min)
TAIL_MASS = 1e-15  # dp-accounting's tail-mass truncation of a self-composition (its default)
PLD: TypeAlias = "pld_lib.PrivacyLossDistribution"


class Described(Protocol):
    """What a size refusal names: the event's kind and its JSON form."""

    @property
    def kind(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


def neighboring_relation(relation: str) -> dp_accounting.NeighboringRelation:
    """dp-accounting's name for ``relation`` (``"replace_one"`` or ``"add_or_remove_one"``)."""
    import dp_accounting

    return {"replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
            "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE}[relation]


def pure_pld(epsilon: float, interval: float, delta: float = 0.0) -> PLD:
    """PLD of ``(ε, δ)``-DP: loss ``+∞`` w.p. ``δ``, else ``+ε`` w.p. ``1/(1+e^{−ε})`` and ``−ε`` w.p.
    ``1/(1+e^{ε})``, that of binary randomized response; the tight dominating pair of every (ε, δ)-DP
    mechanism (Kairouz, Oh & Viswanath, ICML 2015, Sec. 3; dp-accounting's ``from_privacy_parameters``),
    built here with ``e^{−ε}`` above :data:`~sstq_fl.privacy.floats.EXP_SAFE`, where ``e^ε`` overflows.
    ``δ = 0`` is pure ε-DP."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    if epsilon <= EXP_SAFE:
        return pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(epsilon, delta), interval)
    t = math.exp(-epsilon)
    pmf = {math.ceil(epsilon / interval): (1 - delta) / (1 + t), math.ceil(-epsilon / interval): (1 - delta) * t / (1 + t)}
    return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(pmf, delta, interval)


def identity(interval: float) -> PLD:
    """The PLD of a release that reveals nothing (loss 0 with probability 1)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    return pld_lib.identity(interval)


def compose_plds(plds: Iterable[PLD | None], interval: float) -> PLD | None:
    """Compose PLDs in order (``None``, a non-private release, makes the result ``None``; the
    PLDs after it are not built)."""
    out = identity(interval)
    for p in plds:
        if p is None:
            return None
        _check_compose(out, p, interval)
        out = out.compose(p)
    return out


# ---------------------------------------------------------------------- size guards

_WORK: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("sstq_fl_pld_work", default=None)


@contextlib.contextmanager
def work_budget(work: list[float]) -> Iterator[None]:
    """Charge the PLD points built or composed inside the block to ``work[0]`` (refused past
    :data:`MAX_PLD_WORK`)."""
    token = _WORK.set(work)
    try:
        yield
    finally:
        _WORK.reset(token)


def _spend(points: float, what: str) -> None:
    """Add ``points`` to the current budget; refuse once it passes :data:`MAX_PLD_WORK`."""
    work = _WORK.get()
    if work is None:
        return
    work[0] += points
    if work[0] > MAX_PLD_WORK:
        raise AccountingLimitError(f"accounting these events needs more than {MAX_PLD_WORK} privacy-loss-distribution "
                                   f"points in all (limit), the last for {what}; too many distinct events to account")


def check_dense_width(event: Described, width: float, interval: float) -> None:
    """Refuse ``event`` if its PLD, a privacy loss spanning ``width``, needs more than
    :data:`MAX_PLD_POINTS` grid points of spacing ``interval``; else charge them to the work budget."""
    points = width / interval
    if not points <= MAX_PLD_POINTS:
        raise AccountingLimitError(f"one {event.kind} event {event.to_json()} needs a privacy-loss distribution of "
                                   f"{points:.3g} points at discretization {interval:g} (limit {MAX_PLD_POINTS}); its "
                                   f"privacy loss is too large to account")
    _spend(points, f"a {event.kind} event")


def check_self_compose(p: PLD, n: int, event: Described, interval: float) -> None:
    """Refuse the ``n``-fold self-composition of ``p`` (the PLD of ``event``) if it would exceed
    :data:`MAX_PLD_POINTS`; else charge its points to the work budget."""
    for pmf in _pmfs(p):
        points = _self_compose_points(pmf, n)
        if points > MAX_PLD_POINTS:
            raise AccountingLimitError(f"composing {n} {event.kind} event(s) needs a privacy-loss distribution of "
                                       f"{points:.3g} points at discretization {interval:g} (limit {MAX_PLD_POINTS})")
        _spend(points, f"{n} {event.kind} event(s)")


def _check_compose(a: PLD, b: PLD, interval: float) -> None:
    """Refuse composing two PLDs whose dense convolution would exceed :data:`MAX_PLD_POINTS`."""
    for pa, pb in zip(_pmfs(a) * 2, _pmfs(b) * 2):  # remove with remove, add with add
        sparse = _is_sparse(pa) and _is_sparse(pb)
        if sparse and pa.size * pb.size <= 1000:
            continue
        points = _width(pa) + _width(pb)
        if points > MAX_PLD_POINTS:
            raise AccountingLimitError(f"composing the ledger's events needs a privacy-loss distribution of {points:.3g} "
                                       f"points at discretization {interval:g} (limit {MAX_PLD_POINTS})")
        _spend(points, "a composition")


def _pmfs(p: PLD) -> list[pld_pmf.PLDPmf]:
    """The remove and add PMFs of ``p`` (one when it is symmetric); dp-accounting 0.6 internals."""
    return [p._pmf_remove] if p._symmetric else [p._pmf_remove, p._pmf_add]


def _is_sparse(pmf: pld_pmf.PLDPmf) -> bool:
    """Whether ``pmf`` is dp-accounting's sparse PMF (a dict of losses), not a dense array."""
    from dp_accounting.pld import pld_pmf

    return isinstance(pmf, pld_pmf.SparsePLDPmf)


def _grid(pmf: pld_pmf.PLDPmf) -> tuple[np.ndarray, np.ndarray, int]:
    """Grid positions (from the lowest loss) and probabilities of a PMF's finite losses, and its dense width."""
    if _is_sparse(pmf):
        if not pmf._loss_probs:
            return np.zeros(1), np.zeros(1), 1
        losses = np.array(sorted(pmf._loss_probs), dtype=np.float64)
        probs = np.array([pmf._loss_probs[int(k)] for k in losses])
        return losses - losses[0], probs, int(losses[-1] - losses[0]) + 1
    probs = np.asarray(pmf.to_dense_pmf()._probs, dtype=np.float64)
    return np.arange(len(probs), dtype=np.float64), probs, len(probs)


def _self_compose_points(pmf: pld_pmf.PLDPmf, n: int) -> int:
    """Grid points dp-accounting allocates for the ``n``-fold self-composition of ``pmf``.

    A sparse PMF stays sparse while ``size^n ≤ 1000``; otherwise the dense length is the
    Chernoff truncation window of ``common.compute_self_convolve_bounds`` at tail mass
    :data:`TAIL_MASS`: for every order ``t``, ``P[S_n ≥ u] ≤ e^{n log E[e^{tX}] − t u}``
    (evaluated here on the non-zero entries only: same orders, same bound).
    """
    if _is_sparse(pmf) and (pmf.size <= 1 or n * math.log(pmf.size) <= math.log(1000)):
        return int(pmf.size) ** n
    if _width(pmf) > MAX_PLD_POINTS:
        return _width(pmf)
    from scipy import special

    pos, probs, width = _grid(pmf)
    upper, lower = (width - 1) * n, 0
    for order in np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / width:
        bound = (n * float(special.logsumexp(pos * order, b=probs)) + math.log(2 / TAIL_MASS)) / order
        if math.isfinite(bound):
            upper, lower = (min(upper, math.ceil(bound)), lower) if order > 0 else (upper, max(lower, math.floor(bound)))
    return upper - lower + 1


def _width(pmf: pld_pmf.PLDPmf) -> int:
    """Grid points of ``pmf`` once dense (a sparse PMF spans its lowest to its highest loss)."""
    if _is_sparse(pmf):
        keys = list(pmf._loss_probs)
        return max(keys) - min(keys) + 1 if keys else 1
    return int(pmf.size)
