"""One privacy ledger per run: declared plan, budget, composition, transcript, replay.

Composition is done with ``dp-accounting``'s privacy-loss distributions (PLD, Meiser &
Mohammadi 2018; Koskela et al. 2020; Doroshenko et al. 2022), built here event by event so
that every count is composed with ``self_compose`` (dp-accounting 0.6's PLD accountant
ignores the count of a self-composed randomized-response event; see the regression test).
A Rényi-DP figure is offered as an independent cross-check where dp-accounting's RDP
accountant supports the events (``rdp_epsilon``).

One neighbouring relation per ledger.  Unsupported combinations raise
:class:`UnsupportedEventError` naming the mechanism, never a silently wrong number.

Limits (each refused with a one-line :class:`AccountingLimitError`, never a crash or a hang):
at most :data:`MAX_EVENTS` mechanism executions per ledger (an event's *weight* times its
count, see :func:`event_weight`), and no privacy-loss distribution of more than
:data:`MAX_PLD_POINTS` grid points (checked before it is built, from dp-accounting's own
Chernoff truncation bounds), nor more than :data:`MAX_PLD_WORK` points built and composed in
all for one composition (many distinct events) or for validating a ledger's distinct events.

Transcripts are JSON Lines: a header (format, version, relation, discretization, library
versions, budget, plan, notes), one line per recorded event, and a summary that must be the
last line.  :meth:`PrivacyLedger.from_transcript` is strict: every malformed or inconsistent
transcript raises :class:`TranscriptError` with a one-line message naming the problem and the
line (unknown or missing fields, wrong JSON types, non-positive/fractional/bool/huge counts,
events beyond the declared plan, a missing, misplaced or repeated summary, summary fields
that contradict the events).  :func:`replay` recomputes ε and compares it with the recorded
one to the relative tolerance :data:`REPLAY_RTOL` (PLD numerics differ in the last digits
between machines).  :func:`transcript_binding` / :func:`check_binding` bind a run's
``metrics.json`` to its transcript by run id and sha256.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import math
import platform
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import dp_accounting
import numpy as np
from dp_accounting.pld import common, pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special

from ..io import atomic_write_bytes, finite_json
from .events import (
    EXP_SAFE,
    RELATIONS,
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PublicDataEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
    finite_real,
)

TRANSCRIPT_FORMAT = "sstq-fl-privacy-transcript"
TRANSCRIPT_VERSION = 2  # 2: the summary also carries run_id, complete, stopped_early and accountant
READABLE_VERSIONS = (1, 2)
MAX_EVENTS = 10**7  # mechanism executions per ledger (per event line, per plan, in total)
MAX_PLD_POINTS = 2**24  # grid points of any privacy-loss distribution the ledger builds (~130 MB each)
MAX_PLD_WORK = 2**25  # grid points built and composed in all, per composition and per ledger's validations (~1 min)
MAX_TRANSCRIPT_BYTES = 64 * 2**20  # a transcript file larger than this is refused unread
MAX_JSON_DEPTH = 64  # nesting of JSON containers accepted on one transcript line
REPLAY_RTOL = 1e-6  # replayed and recorded ε agree if |a − b| <= REPLAY_RTOL · max(|a|, |b|) ...
REPLAY_ATOL = 1e-9  # ... or |a − b| <= REPLAY_ATOL (both ε near 0); an infinite ε matches only ∞
_TAIL_MASS = 1e-15  # dp-accounting's tail-mass truncation of a self-composition (its default)
_KOV_WINDOW_FROM = 100_000  # above this many rounds the exact pure composition sums a window
PLD: TypeAlias = pld_lib.PrivacyLossDistribution


class UnsupportedEventError(ValueError):
    """The ledger cannot account for this event under its neighbouring relation."""


class BudgetExceededError(ValueError):
    """A declared plan would spend more than the user's budget."""


class PlanExceededError(ValueError):
    """A recorded event was not declared in the plan (or exceeds its declared count)."""


class AccountingLimitError(ValueError):
    """The composition exceeds :data:`MAX_EVENTS` or :data:`MAX_PLD_POINTS`."""


class TranscriptError(ValueError):
    """A transcript (or a metrics binding) that is malformed, inconsistent or not a transcript.

    The message is always one line (line breaks in quoted content are escaped)."""

    def __init__(self, message: str):
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))


@dataclass(frozen=True)
class Budget:
    """The user's total budget ``(ε, δ)`` for a run."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ValueError(f"budget epsilon must be positive, got {self.epsilon}")
        if not 0 <= self.delta < 1:
            raise ValueError(f"budget delta must be in [0, 1), got {self.delta}")


@dataclass
class Entry:
    event: PrivacyEvent
    count: int
    subset: str = "private"
    note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {"type": "event", "event": self.event.to_json(), "count": self.count, "subset": self.subset, "note": self.note}
        if self.meta:  # what a pipeline records about one execution (stage, bound, std, q, clients, ...)
            out["meta"] = self.meta
        return out

    def merges_with(self, event: PrivacyEvent, subset: str, note: str, meta: dict[str, Any] | None) -> bool:
        return not meta and not self.meta and self.event == event and self.subset == subset and self.note == note


def _neighbor_rel(relation: str) -> dp_accounting.NeighboringRelation:
    return {"replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
            "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE}[relation]


def amplified_pure_epsilon(epsilon: float, q: float) -> float:
    """``ε' = log(1 + q (e^ε − 1))``: a Poisson(q)-subsampled ε-DP mechanism is ε'-DP against
    an observer who does not learn whether the individual was sampled (Balle, Barthe &
    Gaboardi 2018, Thm. 8, by advanced joint convexity; for local randomizers it needs the
    absent individual's view to be that of a message on a public null input).

    Above :data:`EXP_SAFE`, where ``e^ε`` overflows, the same value is computed as
    ``ε + log(q + (1 − q) e^{−ε})``."""
    if epsilon <= EXP_SAFE:
        return math.log1p(q * math.expm1(epsilon))
    return epsilon + math.log(q + (1 - q) * math.exp(-epsilon))


def event_weight(event: PrivacyEvent) -> int:
    """How many mechanism executions one ``event`` stands for (the unit of :data:`MAX_EVENTS`):
    1 for a mechanism, ``c·w`` for a ``c``-fold self-composition of a weight-``w`` event, the
    sum over a composition, the inner event's weight for a subsampled one."""
    if isinstance(event, SelfComposedEvent):
        return event.count * event_weight(event.event)
    if isinstance(event, ComposedEvent):
        return sum(event_weight(e) for e in event.events)
    if isinstance(event, PoissonSampledEvent):
        return event_weight(event.event)
    return 1


# ---------------------------------------------------------------------- PLD size guards

_WORK: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("sstq_fl_pld_work", default=None)


@contextlib.contextmanager
def _work_budget(work: list[float]) -> Iterator[None]:
    """Charge the PLD points built or composed inside the block to ``work`` (see :func:`_spend`)."""
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


def _check_dense_width(event: PrivacyEvent, relation: str, interval: float) -> None:
    """Refuse a Gaussian or Laplace event whose PLD alone would exceed :data:`MAX_PLD_POINTS`.

    Loss ranges (dp-accounting truncates the Gaussian's tails at mass ``e^{-50}``, about 10
    standard deviations): Gaussian ``Δ²/σ² + 24Δ/σ`` with ``Δ = 2`` under replace_one, ``1``
    under add_or_remove_one; Laplace ``2/b``.  A subsampled event is bounded by its inner one.
    """
    inner = event.event if isinstance(event, PoissonSampledEvent) else event
    if isinstance(inner, GaussianEvent):
        r = (2.0 if relation == "replace_one" else 1.0) / inner.noise_multiplier
        width = r * r + 24 * r
    elif isinstance(inner, LaplaceEvent):
        width = 2 / inner.noise_multiplier
    else:
        return
    points = width / interval
    if not points <= MAX_PLD_POINTS:
        raise AccountingLimitError(f"one {event.kind} event {event.to_json()} needs a privacy-loss distribution of "
                                   f"{points:.3g} points at discretization {interval:g} (limit {MAX_PLD_POINTS}); its "
                                   f"privacy loss is too large to account")
    _spend(points, f"a {event.kind} event")


def _pmfs(p: PLD) -> list[pld_pmf.PLDPmf]:
    """The remove and add PMFs of ``p`` (one when it is symmetric); dp-accounting 0.6 internals."""
    return [p._pmf_remove] if p._symmetric else [p._pmf_remove, p._pmf_add]


def _grid(pmf: pld_pmf.PLDPmf) -> tuple[np.ndarray, np.ndarray, int]:
    """Grid positions (from the lowest loss) and probabilities of a PMF's finite losses, and its dense width."""
    if isinstance(pmf, pld_pmf.SparsePLDPmf):
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
    ``1e-15``, evaluated here on the non-zero entries only (same orders, same bound).
    """
    if isinstance(pmf, pld_pmf.SparsePLDPmf) and (pmf.size <= 1 or n * math.log(pmf.size) <= math.log(1000)):
        return int(pmf.size) ** n
    if _width(pmf) > MAX_PLD_POINTS:
        return _width(pmf)
    pos, probs, width = _grid(pmf)
    upper, lower = (width - 1) * n, 0
    for order in np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / width:
        bound = (n * float(special.logsumexp(pos * order, b=probs)) + math.log(2 / _TAIL_MASS)) / order
        if math.isfinite(bound):
            upper, lower = (min(upper, math.ceil(bound)), lower) if order > 0 else (upper, max(lower, math.floor(bound)))
    return upper - lower + 1


def _check_self_compose(p: PLD, n: int, event: PrivacyEvent, interval: float) -> None:
    for pmf in _pmfs(p):
        points = _self_compose_points(pmf, n)
        if points > MAX_PLD_POINTS:
            raise AccountingLimitError(f"composing {n} {event.kind} event(s) needs a privacy-loss distribution of "
                                       f"{points:.3g} points at discretization {interval:g} (limit {MAX_PLD_POINTS})")
        _spend(points, f"{n} {event.kind} event(s)")


def _check_compose(a: PLD, b: PLD, interval: float) -> None:
    """Refuse composing two PLDs whose dense convolution would exceed :data:`MAX_PLD_POINTS`."""
    for pa, pb in zip(_pmfs(a) * 2, _pmfs(b) * 2):  # remove with remove, add with add
        sparse = isinstance(pa, pld_pmf.SparsePLDPmf) and isinstance(pb, pld_pmf.SparsePLDPmf)
        if sparse and pa.size * pb.size <= 1000:
            continue
        points = _width(pa) + _width(pb)
        if points > MAX_PLD_POINTS:
            raise AccountingLimitError(f"composing the ledger's events needs a privacy-loss distribution of {points:.3g} "
                                       f"points at discretization {interval:g} (limit {MAX_PLD_POINTS})")
        _spend(points, "a composition")


def _width(pmf: pld_pmf.PLDPmf) -> int:
    """Grid points of ``pmf`` once dense (a sparse PMF spans its lowest to its highest loss)."""
    if isinstance(pmf, pld_pmf.SparsePLDPmf):
        keys = list(pmf._loss_probs)
        return max(keys) - min(keys) + 1 if keys else 1
    return int(pmf.size)


# ---------------------------------------------------------------------- accounting


def event_pld(event: PrivacyEvent, relation: str, interval: float) -> PLD | None:
    """The PLD of ``event`` under ``relation``; ``None`` for a non-private event.

    Every PLD is size-checked before it is built (:class:`AccountingLimitError`)."""
    rel = _neighbor_rel(relation)
    if isinstance(event, PureDpEvent):
        if event.relation != relation:
            raise UnsupportedEventError(f"{event.kind} event holds under {event.relation}, but this ledger's relation is "
                                        f"{relation}")
        return _pure_pld(event.epsilon, interval)
    if isinstance(event, RandomizedResponseEvent):
        if relation != "replace_one":
            raise UnsupportedEventError("randomized_response is accounted only under replace_one")
        return pld_lib.from_randomized_response(event.noise_parameter, event.num_buckets, value_discretization_interval=interval,
                                                neighboring_relation=rel)
    if isinstance(event, GaussianEvent | LaplaceEvent):
        return _noise_pld(event, relation, interval)
    if isinstance(event, PoissonSampledEvent):
        return _sampled_pld(event, relation, interval)
    if isinstance(event, SelfComposedEvent):
        return _self_composed_pld(event, relation, interval)
    if isinstance(event, ComposedEvent):
        return compose_plds((event_pld(e, relation, interval) for e in event.events), interval)
    if isinstance(event, PublicDataEvent):
        return pld_lib.identity(interval)
    if isinstance(event, NonPrivateEvent):
        return None
    raise UnsupportedEventError(f"the ledger cannot account for a {type(event).__name__} ({event.kind}) event")


def _pure_pld(epsilon: float, interval: float) -> PLD:
    """PLD of pure ε-DP: loss ``+ε`` w.p. ``1/(1+e^{−ε})``, ``−ε`` w.p. ``1/(1+e^{ε})`` (dp-accounting's
    ``from_privacy_parameters``; built here with ``e^{−ε}`` above :data:`EXP_SAFE`, where it overflows)."""
    if epsilon <= EXP_SAFE:
        return pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(epsilon, 0.0), interval)
    t = math.exp(-epsilon)
    pmf = {math.ceil(epsilon / interval): 1 / (1 + t), math.ceil(-epsilon / interval): t / (1 + t)}
    return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(pmf, 0.0, interval)


def _noise_pld(event: GaussianEvent | LaplaceEvent, relation: str, interval: float) -> PLD:
    """PLD of the Gaussian (either relation) or Laplace (add_or_remove_one) mechanism, size-checked first."""
    if isinstance(event, LaplaceEvent):
        _need_add_remove(event, relation)
    _check_dense_width(event, relation, interval)
    if isinstance(event, GaussianEvent):
        return pld_lib.from_gaussian_mechanism(event.noise_multiplier, value_discretization_interval=interval,
                                               neighboring_relation=_neighbor_rel(relation))
    return pld_lib.from_laplace_mechanism(event.noise_multiplier, value_discretization_interval=interval)


def _need_add_remove(event: PrivacyEvent, relation: str) -> None:
    if relation != "add_or_remove_one":
        raise UnsupportedEventError(f"{event.kind} is accounted only under add_or_remove_one (ledger: {relation})")


def _self_composed_pld(event: SelfComposedEvent, relation: str, interval: float) -> PLD | None:
    inner = event_pld(event.event, relation, interval)
    if event.count == 0:
        return pld_lib.identity(interval)
    if inner is None:
        return None
    _check_self_compose(inner, event.count, event.event, interval)
    return inner.self_compose(event.count)


def _sampled_pld(event: PoissonSampledEvent, relation: str, interval: float) -> PLD:
    q, inner = event.sampling_probability, event.event
    if isinstance(inner, GaussianEvent):
        _check_dense_width(event, relation, interval)
        return pld_lib.from_gaussian_mechanism(inner.noise_multiplier, value_discretization_interval=interval,
                                               sampling_prob=q, neighboring_relation=_neighbor_rel(relation))
    if isinstance(inner, LaplaceEvent):
        _need_add_remove(event, relation)
        _check_dense_width(event, relation, interval)
        return pld_lib.from_laplace_mechanism(inner.noise_multiplier, value_discretization_interval=interval,
                                              sampling_prob=q)
    if isinstance(inner, PureDpEvent):
        amplified = PureDpEvent(amplified_pure_epsilon(inner.epsilon, q), inner.relation)
        out = event_pld(amplified, relation, interval)
        assert out is not None
        return out
    raise UnsupportedEventError(f"Poisson subsampling of a {inner.kind} event is not supported by the ledger")


def compose_plds(plds: Iterable[PLD | None], interval: float) -> PLD | None:
    """Compose PLDs in order (``None``, a non-private release, makes the result ``None``)."""
    out = pld_lib.identity(interval)
    for p in plds:
        if p is None:
            return None
        _check_compose(out, p, interval)
        out = out.compose(p)
    return out


def rdp_event(event: PrivacyEvent, relation: str) -> dp_accounting.DpEvent:
    """Map an event onto dp-accounting's RDP accountant (add/remove semantics), or refuse.

    Under replace_one a Gaussian's neighbouring outputs differ by ``2C``, so its RDP noise
    multiplier is halved; a pure ε-DP event is ``ε²/2``-zCDP (Bun & Steinke 2016)."""
    if isinstance(event, GaussianEvent):
        return dp_accounting.GaussianDpEvent(event.noise_multiplier / (2 if relation == "replace_one" else 1))
    if isinstance(event, PureDpEvent):
        return dp_accounting.ZCDpEvent(event.epsilon**2 / 2)
    if isinstance(event, PoissonSampledEvent) and relation == "add_or_remove_one":
        return dp_accounting.PoissonSampledDpEvent(event.sampling_probability, rdp_event(event.event, relation))
    if isinstance(event, SelfComposedEvent):
        return dp_accounting.SelfComposedDpEvent(rdp_event(event.event, relation), event.count)
    if isinstance(event, ComposedEvent):
        return dp_accounting.ComposedDpEvent([rdp_event(e, relation) for e in event.events])
    if isinstance(event, PublicDataEvent):
        return dp_accounting.NoOpDpEvent()
    raise UnsupportedEventError(f"no RDP cross-check for a {event.kind} event under {relation}")


def homogeneous_pure(entries: Sequence[Entry]) -> tuple[float, int] | None:
    """``(ε₀, k)`` when the entries are ``k`` runs of one pure ε₀-DP mechanism, else ``None``."""
    eps, k = None, 0
    for e in entries:
        ev = e.event
        if isinstance(ev, PublicDataEvent) or e.count == 0:
            continue
        if not isinstance(ev, PureDpEvent) or (eps is not None and ev.epsilon != eps):
            return None
        eps, k = ev.epsilon, k + e.count
    return (eps, k) if eps is not None else None


def _kov_terms(eps0: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``j`` and ``log P(j)`` for ``j ~ Bin(k, 1/(1+e^{ε₀}))`` (the terms of δ(ε) below).

    For ``k`` above 10^5 only ``|j − k p| ≤ 20√k`` is kept: by Hoeffding every other term has
    probability below ``e^{-800}``, which is exactly 0 in float64, so the sum is unchanged.
    ``1/(1+e^{ε₀})`` is computed as ``e^{−ε₀}/(1+e^{−ε₀})`` above :data:`EXP_SAFE`.
    """
    from scipy import stats

    p = 1 / (1 + math.exp(eps0)) if eps0 <= EXP_SAFE else math.exp(-eps0) / (1 + math.exp(-eps0))
    if k > _KOV_WINDOW_FROM:
        half = 20 * math.sqrt(k)
        j = np.arange(max(0, math.floor(k * p - half)), min(k, math.ceil(k * p + half)) + 1)
    else:
        j = np.arange(k + 1)
    return j, stats.binom.logpmf(j, k, p)


def _kov_delta(eps0: float, k: int, terms: tuple[np.ndarray, np.ndarray], eps: float) -> float:
    j, logp = terms
    loss = eps0 * (k - 2 * j)
    m = loss > eps
    return float(np.sum(np.exp(logp[m]) * -np.expm1(eps - loss[m])))


def pure_composition_delta(eps0: float, k: int, eps: float) -> float:
    """Exact ``δ(ε)`` of ``k``-fold composition of ε₀-DP (Kairouz, Oh & Viswanath 2015).

    The tight dominating pair is ``k``-fold binary randomized response: the privacy loss is
    ``L_j = ε₀ (k − 2j)`` with ``j ~ Bin(k, 1/(1+e^{ε₀}))``, and
    ``δ(ε) = Σ_{L_j > ε} P(j) (1 − e^{ε − L_j})``.
    """
    return _kov_delta(eps0, k, _kov_terms(eps0, k), eps)


def pure_composition_epsilon(eps0: float, k: int, delta: float) -> float:
    """Smallest ε with ``δ(ε) ≤ delta`` for ``k``-fold ε₀-DP composition (bisection, 1e-12).

    ``O(k)`` once (the binomial terms), then ``O(k)`` per bisection step."""
    if k == 0:
        return 0.0
    terms = _kov_terms(eps0, k)
    lo, hi = 0.0, eps0 * k
    if _kov_delta(eps0, k, terms, 0.0) <= delta:
        return 0.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if _kov_delta(eps0, k, terms, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def _planned_counts(plan: Sequence[tuple[PrivacyEvent, int]]) -> dict[PrivacyEvent, int]:
    counts: dict[PrivacyEvent, int] = {}
    for ev, n in plan:
        counts[ev] = counts.get(ev, 0) + n
    return counts


def _check_count(count: Any, what: str = "count", minimum: int = 0) -> int:
    """``count`` if it is an integer (not a bool) in ``[minimum, MAX_EVENTS]``, else ValueError."""
    if isinstance(count, bool) or not isinstance(count, int) or not minimum <= count <= MAX_EVENTS:
        kind = "a positive" if minimum == 1 else "a non-negative"
        raise ValueError(f"{what} must be {kind} integer of at most {MAX_EVENTS}, got {_show(count)}")
    return count


def _show(v: Any, limit: int = 60) -> str:
    """A short one-line ``repr`` for error messages."""
    try:
        r = repr(v)
    except (RecursionError, ValueError):
        r = f"<{type(v).__name__}>"
    return r if len(r) <= limit else r[: limit - 3] + "..."


def epsilon_close(a: float, b: float) -> bool:
    """Whether two ε agree to the replay tolerance (:data:`REPLAY_RTOL`, :data:`REPLAY_ATOL`);
    an infinite ε agrees only with an infinite ε of the same sign."""
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=REPLAY_RTOL, abs_tol=REPLAY_ATOL)


@dataclass
class PrivacyLedger:
    """All privacy events of one run, under one neighbouring relation.

    Typical use: ``ledger.start(plan, Budget(ε, δ))`` before any private computation (it
    refuses a plan that exceeds the budget), ``ledger.record(event, count)`` as mechanisms
    run (refused if the plan did not declare it), ``ledger.epsilon(δ)`` for the spend so far,
    ``ledger.write_transcript(path)`` at checkpoints, and ``ledger.mark_complete()`` before
    the final transcript (a plan with fewer recorded events than declared is then a completed
    run with client sampling, not an early stop).  ``run_id`` (kept in ``notes["run_id"]``)
    names the run in the transcript's header and summary.
    """

    relation: str = "replace_one"
    discretization: float = 1e-4
    entries: list[Entry] = field(default_factory=list)
    plan: list[tuple[PrivacyEvent, int]] | None = None
    budget: Budget | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    complete: bool = False

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        if isinstance(self.discretization, bool) or not 0 < self.discretization <= 0.1:
            raise ValueError(f"discretization interval must be in (0, 0.1], got {self.discretization}")
        self._cache: tuple[int, PLD | None] | None = None
        self._supported: dict[PrivacyEvent, int] = {}  # accountable events and their weights
        self._used: dict[PrivacyEvent, int] = {}
        self._executions = sum(e.count * event_weight(e.event) for e in self.entries)
        self._allowed: dict[PrivacyEvent, int] = {}
        self._planned: PrivacyLedger | None = None
        self._validation_work = [0.0]

    @property
    def run_id(self) -> str | None:
        """The run's id (``notes["run_id"]``), or ``None`` when the run has none."""
        rid = self.notes.get("run_id")
        return rid if isinstance(rid, str) else None

    @run_id.setter
    def run_id(self, value: str) -> None:
        if not (isinstance(value, str) and value):
            raise ValueError(f"run_id must be a non-empty string, got {value!r}")
        self.notes["run_id"] = value

    def mark_complete(self) -> None:
        """The run finished: no event is recorded after this, and the summary says ``stopped_early: false``."""
        self.complete = True

    def _validate(self, event: PrivacyEvent) -> int:
        """Refuse an event the ledger cannot account for; its weight (checked once per distinct event)."""
        if event not in self._supported:
            weight = event_weight(event)
            if weight > MAX_EVENTS:
                raise AccountingLimitError(f"one {event.kind} event stands for {weight} mechanism executions "
                                           f"(limit {MAX_EVENTS})")
            with _work_budget(self._validation_work):  # all distinct events together
                event_pld(event, self.relation, self.discretization)
            self._supported[event] = weight
        return self._supported[event]

    # ------------------------------------------------------------------ planning
    def start(self, plan: Sequence[tuple[PrivacyEvent, int]], budget: Budget | None = None) -> float:
        """Declare the whole run; returns its planned ε (at the budget's δ, or 1e-5)."""
        if self.entries:
            raise ValueError("a plan must be declared before any event is recorded")
        total = 0
        for ev, n in plan:
            total += _check_count(n, "planned count") * self._validate(ev)  # refuse unsupported events now
        if total > MAX_EVENTS:
            raise AccountingLimitError(f"the plan declares {total} mechanism executions (limit {MAX_EVENTS})")
        planned = PrivacyLedger(self.relation, self.discretization, [Entry(ev, n) for ev, n in plan])
        delta = budget.delta if budget else 1e-5
        spend = planned.epsilon(delta)
        if budget is not None and spend > budget.epsilon:
            raise BudgetExceededError(f"the planned run spends epsilon={spend:.4g} at delta={delta:g}, which exceeds the "
                                      f"budget epsilon={budget.epsilon:g} at delta={budget.delta:g}")
        self._set_plan(list(plan), budget)
        self._planned = planned
        return spend

    def _set_plan(self, plan: list[tuple[PrivacyEvent, int]], budget: Budget | None) -> None:
        self.plan, self.budget = plan, budget
        self._allowed = _planned_counts(plan)
        self._planned = None

    def planned_epsilon(self, delta: float) -> float:
        if self.plan is None:
            raise ValueError("no plan was declared")
        if self._planned is None:  # cached: its PLD is built once
            self._planned = PrivacyLedger(self.relation, self.discretization, [Entry(ev, n) for ev, n in self.plan])
        return self._planned.epsilon(delta)

    # ------------------------------------------------------------------ recording
    def record(self, event: PrivacyEvent, count: int = 1, subset: str = "private", note: str = "",
               meta: dict[str, Any] | None = None) -> None:
        """Charge ``count`` runs of ``event`` (validated now, refused if unsupported or unplanned).

        ``meta`` (JSON-able) describes this execution in the transcript (one line each).  A
        zero count charges nothing and writes no line.
        """
        _check_count(count)
        if self.complete:
            raise ValueError("the run was marked complete; no further event can be recorded")
        last = self.entries[-1] if self.entries else None
        if self.plan is None and last is not None and last.event is event and last.merges_with(event, subset, note, meta):
            self._charge(event, count, self._validate(event))  # fast path: the same event object (every DP-SGD step)
            last.count += count
            self._cache = None
            return
        self._charge(event, count, self._validate(event))
        if count == 0:
            return
        if last is not None and last.merges_with(event, subset, note, meta):
            last.count += count
        else:
            self.entries.append(Entry(event, count, subset, note, dict(meta or {})))
        self._cache = None

    def _charge(self, event: PrivacyEvent, count: int, weight: int) -> None:
        """Check ``count`` more runs of ``event`` against the plan and :data:`MAX_EVENTS`, then count them."""
        used = self._used.get(event, 0)
        if self.plan is not None and used + count > self._allowed.get(event, 0):
            raise PlanExceededError(f"recording {count} more {event.kind} event(s) {event.to_json()} exceeds the "
                                    f"declared plan ({used} of {self._allowed.get(event, 0)} used)")
        if self._executions + count * weight > MAX_EVENTS:
            raise AccountingLimitError(f"recording {count} more {event.kind} event(s) takes the ledger past "
                                       f"{MAX_EVENTS} mechanism executions")
        self._used[event] = used + count
        self._executions += count * weight

    # ------------------------------------------------------------------ queries
    def _pld(self) -> PLD | None:
        key = sum(e.count for e in self.entries) * 1_000_003 + len(self.entries)
        if self._cache is None or self._cache[0] != key:
            counts: dict[PrivacyEvent, int] = {}  # composition commutes: one self-composition per distinct event
            for e in self.entries:
                counts[e.event] = counts.get(e.event, 0) + e.count
            plds = (event_pld(SelfComposedEvent(ev, n), self.relation, self.discretization) for ev, n in counts.items())
            with _work_budget([0.0]):
                self._cache = (key, compose_plds(plds, self.discretization))
        return self._cache[1]

    def epsilon(self, delta: float) -> float:
        """Smallest ε such that the composition so far is (ε, δ)-DP (``inf`` if non-private).

        A ledger holding only one pure-ε mechanism (an LDP training run) is answered by the
        exact optimal-composition formula (:func:`pure_composition_epsilon`, no
        discretisation, ``O(k)``); anything else by the PLD accountant.
        """
        if not 0 <= delta < 1:
            raise ValueError(f"delta must be in [0, 1), got {delta}")
        homo = homogeneous_pure(self.entries)
        if homo is not None:
            return pure_composition_epsilon(homo[0], homo[1], delta)
        p = self._pld()
        return math.inf if p is None else max(0.0, float(p.get_epsilon_for_delta(delta)))

    def delta(self, epsilon: float) -> float:
        """Smallest δ such that the composition so far is (ε, δ)-DP."""
        homo = homogeneous_pure(self.entries)
        if homo is not None:
            return pure_composition_delta(homo[0], homo[1], epsilon)
        p = self._pld()
        return 1.0 if p is None else float(p.get_delta_for_epsilon(epsilon))

    def rdp_epsilon(self, delta: float) -> float | None:
        """Independent RDP figure for the same events, or ``None`` where unsupported."""
        acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
        try:
            for e in self.entries:
                acc.compose(rdp_event(e.event, self.relation), e.count)
            return float(acc.get_epsilon(delta))
        except (ValueError, ArithmeticError):  # unsupported events; ε so large that ε² overflows
            return None

    def basic_epsilon(self) -> float:
        """Basic composition ``Σ ε_i`` for pure-ε events (``None`` semantics: ``inf`` otherwise)."""
        total = 0.0
        for e in self.entries:
            ev = e.event
            if isinstance(ev, PureDpEvent):
                total += e.count * ev.epsilon
            elif isinstance(ev, PublicDataEvent):
                continue
            else:
                return math.inf
        return total

    def report(self, delta: float) -> dict[str, Any]:
        """The spend at ``delta``, and the run's status: ``stopped_early`` is true when a plan was
        declared and the run was not marked complete (a checkpoint written mid-run)."""
        out: dict[str, Any] = {"relation": self.relation, "delta": delta, "epsilon": self.epsilon(delta),
                               "accountant": "pure-kov" if homogeneous_pure(self.entries) is not None else "pld",
                               "epsilon_rdp_crosscheck": self.rdp_epsilon(delta),
                               "events": sum(e.count for e in self.entries), "run_id": self.run_id,
                               "complete": self.complete, "stopped_early": self.plan is not None and not self.complete}
        if self.plan is not None:
            out["planned_epsilon"] = self.planned_epsilon(delta)
        return out

    # ------------------------------------------------------------------ transcripts
    def header(self) -> dict[str, Any]:
        from .. import __version__

        return {"type": "header", "format": TRANSCRIPT_FORMAT, "version": TRANSCRIPT_VERSION,
                "relation": self.relation, "discretization": self.discretization,
                "libraries": {"sstq_fl": __version__, "dp_accounting": _dp_accounting_version(),
                              "python": platform.python_version()},
                "budget": None if self.budget is None else {"epsilon": self.budget.epsilon, "delta": self.budget.delta},
                "plan": None if self.plan is None else [{"event": ev.to_json(), "count": n} for ev, n in self.plan],
                "notes": self.notes}

    def transcript_lines(self, delta: float | None = None) -> list[dict[str, Any]]:
        lines = [self.header(), *(e.to_json() for e in self.entries)]
        if delta is not None:
            lines.append({"type": "summary", **self.report(delta)})
        return lines

    def write_transcript(self, path: str | Path, delta: float | None = None) -> str:
        """Write the JSON Lines transcript atomically; return the sha256 (hex) of the bytes written.

        The summary line is always written, at ``delta`` (default: the budget's δ, else 1e-5):
        a transcript without it reads as truncated."""
        if delta is None:
            delta = self.budget.delta if self.budget is not None else 1e-5
        text = "".join(json.dumps(finite_json(line), sort_keys=True, allow_nan=False) + "\n"
                       for line in self.transcript_lines(delta))  # standard JSON: an infinite ε is written null
        data = text.encode()
        atomic_write_bytes(path, data)
        return hashlib.sha256(data).hexdigest()

    @classmethod
    def from_transcript(cls, path: str | Path) -> tuple[PrivacyLedger, dict[str, Any]]:
        """Rebuild a ledger from a transcript alone; returns it and the recorded summary.

        Strict: anything malformed or inconsistent raises :class:`TranscriptError` (see the
        module docstring); the composition is also checked against the accounting limits, so
        that ``epsilon`` at any δ then answers."""
        try:
            parsed = _parse_transcript(_read_transcript(path), str(path))
            led = cls(parsed.relation, parsed.discretization, notes=parsed.notes)
            led._set_plan_from(parsed)
            for lineno, obj in parsed.events:
                led._admit(_entry_from_line(obj, _where(parsed.path, lineno)), _where(parsed.path, lineno))
            led._check_summary(parsed)
            led._check_accountable(parsed)
        except (RecursionError, MemoryError, ArithmeticError) as exc:
            raise TranscriptError(f"{path}: cannot be read or accounted ({type(exc).__name__})") from exc
        return led, parsed.summary

    def _set_plan_from(self, parsed: _Transcript) -> None:
        if parsed.plan is None:
            if parsed.budget is not None:
                self.budget = parsed.budget
            return
        total = 0
        for ev, n in parsed.plan:
            total += n * self._accountable_event(ev, f"{parsed.path}, line 1 (plan)")
        if total > MAX_EVENTS:
            raise TranscriptError(f"{parsed.path}, line 1: the plan declares {total} mechanism executions "
                                  f"(limit {MAX_EVENTS})")
        self._set_plan(parsed.plan, parsed.budget)

    def _accountable_event(self, event: PrivacyEvent, where: str) -> int:
        try:
            return self._validate(event)
        except ValueError as exc:  # UnsupportedEventError, AccountingLimitError
            raise TranscriptError(f"{where}: {exc}") from exc

    def _admit(self, entry: Entry, where: str) -> None:
        """Charge a transcript's event line exactly as :meth:`record` would (plan and limits enforced)."""
        weight = self._accountable_event(entry.event, where)
        try:
            self._charge(entry.event, entry.count, weight)
        except ValueError as exc:  # PlanExceededError, AccountingLimitError
            raise TranscriptError(f"{where}: {exc}") from exc
        self.entries.append(entry)

    def _check_summary(self, parsed: _Transcript) -> None:
        """The summary must agree with the events it closes (count, run id, accountant, status)."""
        s, where = parsed.summary, _where(parsed.path, parsed.summary_line)
        events = sum(e.count for e in self.entries)
        if s["events"] != events:
            raise TranscriptError(f"{where}: the summary counts {s['events']} events but the transcript records {events}")
        if s.get("run_id", self.run_id) != self.run_id:
            raise TranscriptError(f"{where}: the summary's run_id {_show(s['run_id'])} is not the header's "
                                  f"{_show(self.run_id)}")
        accountant = "pure-kov" if homogeneous_pure(self.entries) is not None else "pld"
        if s.get("accountant", accountant) != accountant:
            raise TranscriptError(f"{where}: the summary names the {s['accountant']} accountant, but these events are "
                                  f"accounted by {accountant}")
        if ("planned_epsilon" in s) != (self.plan is not None):
            raise TranscriptError(f"{where}: planned_epsilon must be present exactly when the header declares a plan")
        self.complete = s["complete"] if "complete" in s else (self.plan is not None and not s.get("stopped_early", True))
        if s.get("stopped_early", False) != (self.plan is not None and not self.complete):
            raise TranscriptError(f"{where}: stopped_early={s['stopped_early']} contradicts complete={self.complete} "
                                  f"(plan {'declared' if self.plan is not None else 'absent'})")

    def _check_accountable(self, parsed: _Transcript) -> None:
        """Build (and cache) the composition now, refusing it if over the limits; check the budget."""
        try:
            if homogeneous_pure(self.entries) is None:
                self._pld()
            if self.plan is not None:
                self.planned_epsilon(parsed.summary["delta"])
                if self.budget is not None:
                    spend = self.planned_epsilon(self.budget.delta)
                    if spend > self.budget.epsilon and not epsilon_close(spend, self.budget.epsilon):
                        raise TranscriptError(f"{parsed.path}, line 1: the plan spends epsilon={spend:.6g} at "
                                              f"delta={self.budget.delta:g}, over the budget epsilon={self.budget.epsilon:g}")
        except AccountingLimitError as exc:
            raise TranscriptError(f"{parsed.path}: {exc}") from exc


def _dp_accounting_version() -> str:
    from importlib import metadata

    return metadata.version("dp-accounting")


# ---------------------------------------------------------------------- transcript parsing

_HEADER_KEYS = {"type", "format", "version", "relation", "discretization", "libraries", "budget", "plan", "notes"}
_EVENT_KEYS = {"type", "event", "count", "subset", "note"}
_SUMMARY_KEYS = {"type", "relation", "delta", "epsilon", "events", "epsilon_rdp_crosscheck"}
_SUMMARY_V2_KEYS = {"accountant", "run_id", "complete", "stopped_early"}  # required from version 2 on


@dataclass
class _Transcript:
    """A transcript whose lines have each been checked on their own (types, fields, order)."""

    path: str
    version: int
    relation: str
    discretization: float
    notes: dict[str, Any]
    budget: Budget | None
    plan: list[tuple[PrivacyEvent, int]] | None
    events: list[tuple[int, dict[str, Any]]]
    summary: dict[str, Any]
    summary_line: int


def _where(path: str, lineno: int) -> str:
    return f"{path}, line {lineno}"


def _read_transcript(path: str | Path, what: str = "transcript") -> bytes:
    """The file's bytes (refusing a missing or unreadable file and one over :data:`MAX_TRANSCRIPT_BYTES`)."""
    try:
        with open(path, "rb") as f:  # read at most one byte past the limit (a device or pipe may never end)
            data = f.read(MAX_TRANSCRIPT_BYTES + 1)
    except OSError as exc:
        raise TranscriptError(f"cannot read {what} {path}: {exc.strerror or type(exc).__name__}") from exc
    if len(data) > MAX_TRANSCRIPT_BYTES:
        raise TranscriptError(f"{path} is over the {MAX_TRANSCRIPT_BYTES}-byte limit of a {what}")
    return data


def _json_lines(data: bytes, path: str) -> list[tuple[int, Any]]:
    """Decode UTF-8 and parse each line as JSON (no blank lines; one optional final newline)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{path} is not UTF-8 text (invalid byte at offset {exc.start})") from exc
    if not text.strip():
        raise TranscriptError(f"{path} is empty, not an sstq-fl privacy transcript")
    rows = text.split("\n")
    if rows[-1] == "":
        rows.pop()
    return [(i, _json_line(row, _where(path, i), path if i == 1 else None)) for i, row in enumerate(rows, 1)]


def _json_line(row: str, where: str, first_of: str | None) -> Any:
    """One line's JSON value (duplicate keys, deep nesting, invalid JSON refused)."""
    try:
        if not row.strip():
            raise ValueError("the line is empty")
        obj = json.loads(row, object_pairs_hook=_no_duplicate_keys)
    except (ValueError, RecursionError, MemoryError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or type(exc).__name__
        if isinstance(exc, RecursionError):
            why = f"nested more than {MAX_JSON_DEPTH} deep"
        if first_of is not None:
            raise TranscriptError(f"{first_of} is not an sstq-fl privacy transcript (line 1 is not JSON: {why})") from exc
        raise TranscriptError(f"{where}: invalid JSON ({why})") from exc
    _check_depth(obj, where)
    return obj


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {_show(k)}")
        out[k] = v
    return out


def _check_depth(obj: Any, where: str) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH` (iteratively: no recursion)."""
    stack = [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            if d > MAX_JSON_DEPTH:
                raise TranscriptError(f"{where}: JSON nested more than {MAX_JSON_DEPTH} deep")
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))


def _json_type(v: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(v), "a number")


def _exact_keys(obj: dict[str, Any], required: set[str], optional: set[str], where: str) -> None:
    extra, missing = set(obj) - required - optional, required - set(obj)
    if extra:
        raise TranscriptError(f"{where}: unknown field(s) {_show(sorted(extra))}")
    if missing:
        raise TranscriptError(f"{where}: missing field(s) {sorted(missing)}")


def _real(v: Any, what: str, where: str, allow_inf: bool = False) -> float:
    """A JSON number (not a bool, not NaN; infinite only if ``allow_inf``) as float."""
    if allow_inf and isinstance(v, float) and math.isinf(v):
        return v
    try:
        return finite_real(v, what)
    except ValueError as exc:
        raise TranscriptError(f"{where}: {exc}") from exc


def _count_field(v: Any, what: str, where: str, minimum: int) -> int:
    try:
        return _check_count(v, what, minimum)
    except ValueError as exc:
        raise TranscriptError(f"{where}: {exc}") from exc


def _event_field(v: Any, where: str) -> PrivacyEvent:
    try:
        return PrivacyEvent.from_json(v)
    except ValueError as exc:
        raise TranscriptError(f"{where}: {exc}") from exc


def _string(v: Any, what: str, where: str) -> str:
    if not isinstance(v, str):
        raise TranscriptError(f"{where}: {what} must be a string, got {_json_type(v)}")
    return v


def _parse_transcript(data: bytes, path: str) -> _Transcript:
    """Check every line on its own and their order: header first, summary last and once."""
    rows = _json_lines(data, path)
    out = _parse_header(rows[0][1], path)
    summary_line = 0
    for lineno, obj in rows[1:]:
        where = _where(path, lineno)
        if not isinstance(obj, dict):
            raise TranscriptError(f"{where}: expected a JSON object, got {_json_type(obj)}")
        if summary_line:
            again = "a second summary" if obj.get("type") == "summary" else "a line"
            raise TranscriptError(f"{where}: {again} after the summary (line {summary_line}); the summary must be last")
        if obj.get("type") == "event":
            out.events.append((lineno, obj))
        elif obj.get("type") == "summary":
            out.summary, summary_line = _parse_summary(obj, out, where), lineno
        else:
            raise TranscriptError(f"{where}: unknown line type {_show(obj.get('type'))} (expected event or summary)")
    if not summary_line:
        raise TranscriptError(f"{path} has no summary line: the transcript is truncated or unfinished "
                              f"(it must end with its summary)")
    out.summary_line = summary_line
    return out


def _parse_header(obj: Any, path: str) -> _Transcript:
    if not (isinstance(obj, dict) and obj.get("type") == "header" and obj.get("format") == TRANSCRIPT_FORMAT):
        raise TranscriptError(f"{path} is not an sstq-fl privacy transcript (line 1 is not its header)")
    where = _where(path, 1)
    _exact_keys(obj, _HEADER_KEYS, set(), where)
    version = obj["version"]
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise TranscriptError(f"{where}: unsupported transcript version {_show(version)} (readable: {READABLE_VERSIONS})")
    if obj["relation"] not in RELATIONS:
        raise TranscriptError(f"{where}: relation must be one of {RELATIONS}, got {_show(obj['relation'])}")
    disc = _real(obj["discretization"], "discretization", where)
    if not 0 < disc <= 0.1:
        raise TranscriptError(f"{where}: discretization must be in (0, 0.1], got {disc!r}")
    libs, notes = obj["libraries"], obj["notes"]
    if not (isinstance(libs, dict) and all(isinstance(v, str) for v in libs.values())):
        raise TranscriptError(f"{where}: libraries must be an object of version strings")
    if not isinstance(notes, dict):
        raise TranscriptError(f"{where}: notes must be an object, got {_json_type(notes)}")
    if "run_id" in notes:
        _string(notes["run_id"], "notes.run_id", where)
    return _Transcript(path, version, obj["relation"], disc, notes, _parse_budget(obj["budget"], where),
                       _parse_plan(obj["plan"], where), [], {}, 0)


def _parse_budget(obj: Any, where: str) -> Budget | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise TranscriptError(f"{where}: budget must be an object or null, got {_json_type(obj)}")
    _exact_keys(obj, {"epsilon", "delta"}, set(), f"{where} (budget)")
    try:
        return Budget(_real(obj["epsilon"], "budget epsilon", where), _real(obj["delta"], "budget delta", where))
    except TranscriptError:
        raise
    except ValueError as exc:
        raise TranscriptError(f"{where}: {exc}") from exc


def _parse_plan(obj: Any, where: str) -> list[tuple[PrivacyEvent, int]] | None:
    if obj is None:
        return None
    if not isinstance(obj, list):
        raise TranscriptError(f"{where}: plan must be a list or null, got {_json_type(obj)}")
    plan = []
    for i, item in enumerate(obj):
        w = f"{where} (plan item {i})"
        if not isinstance(item, dict):
            raise TranscriptError(f"{w}: expected an object, got {_json_type(item)}")
        _exact_keys(item, {"event", "count"}, set(), w)
        plan.append((_event_field(item["event"], w), _count_field(item["count"], "planned count", w, 0)))
    return plan


def _entry_from_line(obj: dict[str, Any], where: str) -> Entry:
    """One event line: exactly type, event, count (1..MAX_EVENTS), subset, note and optional meta."""
    _exact_keys(obj, _EVENT_KEYS, {"meta"}, where)
    event = _event_field(obj["event"], where)
    count = _count_field(obj["count"], "event count", where, 1)
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise TranscriptError(f"{where}: meta must be an object, got {_json_type(meta)}")
    return Entry(event, count, _string(obj["subset"], "subset", where), _string(obj["note"], "note", where), meta)


def _parse_summary(obj: dict[str, Any], head: _Transcript, where: str) -> dict[str, Any]:
    """The summary's fields, each of its type (consistency with the events is checked later)."""
    v2 = head.version >= 2
    _exact_keys(obj, _SUMMARY_KEYS | (_SUMMARY_V2_KEYS if v2 else set()),
                {"planned_epsilon"} | (set() if v2 else {"accountant", "stopped_early"}), where)
    if obj["relation"] != head.relation:
        raise TranscriptError(f"{where}: the summary's relation {_show(obj['relation'])} is not the header's "
                              f"{head.relation!r}")
    delta = _real(obj["delta"], "summary delta", where)
    if not 0 <= delta < 1:
        raise TranscriptError(f"{where}: summary delta must be in [0, 1), got {delta!r}")
    for key in ("epsilon", "planned_epsilon"):
        if obj.get(key, 0) is None:  # standard JSON writes ε = ∞ as null (older transcripts: Infinity)
            obj[key] = math.inf
    for key in ("epsilon", "planned_epsilon", "epsilon_rdp_crosscheck"):
        if key in obj and not (key == "epsilon_rdp_crosscheck" and obj[key] is None):
            if _real(obj[key], f"summary {key}", where, allow_inf=True) < 0:
                raise TranscriptError(f"{where}: summary {key} must be non-negative, got {obj[key]!r}")
    _count_field(obj["events"], "summary events", where, 0)
    if obj.get("accountant", "pld") not in ("pld", "pure-kov"):
        raise TranscriptError(f"{where}: unknown accountant {_show(obj['accountant'])}")
    for key in ("complete", "stopped_early"):
        if key in obj and not isinstance(obj[key], bool):
            raise TranscriptError(f"{where}: summary {key} must be true or false, got {_show(obj[key])}")
    if obj.get("run_id") is not None:
        _string(obj["run_id"], "summary run_id", where)
    return obj


# ---------------------------------------------------------------------- replay and binding


def replay(path: str | Path, delta: float | None = None) -> dict[str, Any]:
    """Recompute ε from a transcript alone and compare it with the recorded summary.

    At the summary's δ (the default) the recomputed ε and planned ε must agree with the
    recorded ones to :data:`REPLAY_RTOL`; ``matches_recorded`` says whether they do and
    ``mismatch`` says how they differ.  Malformed transcripts raise :class:`TranscriptError`.
    """
    led, summary = PrivacyLedger.from_transcript(path)
    d = summary["delta"] if delta is None else delta
    if isinstance(d, bool) or not 0 <= d < 1:
        raise ValueError(f"delta must be in [0, 1), got {d!r}")
    eps = led.epsilon(d)
    out: dict[str, Any] = {"file": str(path), "relation": led.relation, "delta": d, "epsilon": eps,
                           "epsilon_rdp_crosscheck": led.rdp_epsilon(d), "events": sum(e.count for e in led.entries),
                           "run_id": led.run_id, "complete": led.complete}
    if d == summary["delta"]:
        problems = [] if epsilon_close(eps, summary["epsilon"]) else \
            [f"epsilon recomputed {eps!r}, recorded {summary['epsilon']!r}"]
        if led.plan is not None:
            out["planned_epsilon"] = led.planned_epsilon(d)
            if not epsilon_close(out["planned_epsilon"], summary["planned_epsilon"]):
                problems.append(f"planned epsilon recomputed {out['planned_epsilon']!r}, recorded "
                                f"{summary['planned_epsilon']!r}")
        out["recorded_epsilon"], out["matches_recorded"] = summary["epsilon"], not problems
        if problems:
            out["mismatch"] = "; ".join(problems) + f" (relative tolerance {REPLAY_RTOL:g})"
    return out


def transcript_binding(path: str | Path) -> dict[str, Any]:
    """``{"run_id", "sha256", "epsilon", "delta"}`` of a transcript, for ``metrics.json`` under
    ``"privacy_transcript"``.

    ``sha256`` is the hex digest of the file's bytes; ``run_id``, ``epsilon`` and ``delta`` are
    the summary's (``epsilon`` is ``None`` when infinite, JSON having no infinity; ``run_id``
    is ``None`` for a run without one).  The transcript is checked line by line
    (:class:`TranscriptError`), not re-accounted.
    """
    try:
        data = _read_transcript(path)
        parsed = _parse_transcript(data, str(path))
    except (RecursionError, MemoryError, ArithmeticError) as exc:
        raise TranscriptError(f"{path}: cannot be read ({type(exc).__name__})") from exc
    s = parsed.summary
    rid = s.get("run_id", parsed.notes.get("run_id"))
    return {"run_id": rid, "sha256": hashlib.sha256(data).hexdigest(),
            "epsilon": s["epsilon"] if math.isfinite(s["epsilon"]) else None, "delta": s["delta"]}


def check_binding(metrics: dict[str, Any], transcript_path: str | Path) -> None:
    """Refuse (:class:`TranscriptError`) a transcript that is not the one ``metrics`` is bound to.

    ``metrics["privacy_transcript"]`` (see :func:`transcript_binding`) must name the
    transcript's run id and sha256, its δ, and its ε to :data:`REPLAY_RTOL` (``None`` = ∞).
    """
    b = metrics.get("privacy_transcript") if isinstance(metrics, dict) else None
    if not isinstance(b, dict) or not {"run_id", "sha256", "epsilon", "delta"} <= set(b):
        raise TranscriptError("the metrics carry no privacy_transcript binding (run_id, sha256, epsilon, delta)")
    got = transcript_binding(transcript_path)
    if b["run_id"] != got["run_id"]:
        raise TranscriptError(f"{transcript_path} belongs to run {_show(got['run_id'])}, but the metrics are of run "
                              f"{_show(b['run_id'])}")
    if b["sha256"] != got["sha256"]:
        raise TranscriptError(f"{transcript_path} is not the transcript bound to the metrics: its sha256 is "
                              f"{got['sha256']}, the metrics say {_show(b['sha256'])}")
    if isinstance(b["delta"], bool) or b["delta"] != got["delta"]:
        raise TranscriptError(f"the metrics record delta {_show(b['delta'])}, the transcript {got['delta']!r}")
    rec = math.inf if b["epsilon"] is None else b["epsilon"]
    have = math.inf if got["epsilon"] is None else got["epsilon"]
    if isinstance(rec, bool) or not isinstance(rec, int | float) or not epsilon_close(float(rec), have):
        raise TranscriptError(f"the metrics record epsilon {_show(b['epsilon'])}, the transcript {have!r} "
                              f"(relative tolerance {REPLAY_RTOL:g})")


def read_metrics(path: str | Path) -> dict[str, Any]:
    """A ``metrics.json`` as a JSON object (:class:`TranscriptError` if unreadable or not one)."""
    data = _read_transcript(path, "metrics file")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # invalid JSON or UTF-8, very deep nesting
        raise TranscriptError(f"{path} is not a JSON metrics file ({type(exc).__name__})") from exc
    if not isinstance(obj, dict):
        raise TranscriptError(f"{path} is not a JSON object")
    return obj
