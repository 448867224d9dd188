"""DP-VQG Stage II: exponential-mechanism tokens and randomized-response labels.

Each private record's token map is released location by location with the exponential mechanism (EM; McSherry & Talwar,
"Mechanism Design via Differential Privacy", FOCS 2007) over **all** ``K`` codes of a frozen codebook, and its label
with ``k``-ary randomized response (RR; Warner, JASA 1965; Kairouz, Oh & Viswanath, JMLR 2016).  The mechanisms run on
the clients from uniforms the caller draws with :meth:`~sstq_fl.gen.runner.ClientContext.uniform` (so the coins follow
the run's randomness mode); every function here is deterministic given those uniforms.

Bounded representation: tokens and codes are both projected onto the same ``R``-ball,
``Π_R(v) = v·min(1, R/(‖v‖+10⁻⁸))``, so the utility ``u_l(k) = −‖ē_l − c̄_k‖²`` lies in
``[−4R², 0]`` and has sensitivity ``Δu = 4R²`` (any two inputs are neighbours under
``replace_one``).  The EM draws ``k`` with probability ``∝ exp(ε₀ u_l(k)/(2Δu))``: pure
``ε₀``-DP per location, composed over the ``HW`` locations and the label to the record level
``ε₂`` (parallel composition across records):

* **Mode A** (pure): ``ε₀ = (ε₂ − ε_y)/HW`` is ``(ε₂, 0)``-DP by basic composition.
* **Mode B** (PLD): ``ε₀`` is bisected so that the ledger's privacy-loss distribution of
  ``HW × ε₀-DP`` (recorded with its count) plus the label's ``ε_y``-DP certifies ``ε₂`` at ``δ``.

Feasibility: the EM logit range is ``ε₀/2`` whatever ``R`` is, so at the paper's
budgets (``HW = 49``, ``ε₂ = 2``, ``ε₀ ≈ 0.03–0.07``) the released tokens are near-uniform.
That is reported (:func:`em_peakedness`, :func:`ideal_argmin_probability`,
:func:`record_level_epsilon`), never "fixed".  ``ε = ∞`` is the non-private reference: argmin
tokens and true labels, recorded as a :class:`~sstq_fl.privacy.events.NonPrivateEvent` (not DP).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

import numpy as np
import torch
from numpy.typing import NDArray

from ...config.vocab import VQG_LABELS as LABELS
from ...config.vocab import VQG_MODES as MODES
from ...config.vocab import VQG_VARIANTS as VARIANTS
from ...privacy.errors import AccountingLimitError
from ...privacy.events import (
    ExponentialMechanismEvent,
    NonPrivateEvent,
    PrivacyEvent,
    PublicDataEvent,
    PureDpEvent,
    SelfComposedEvent,
    flat_rr_probabilities,
)
from ...privacy.ledger import PrivacyLedger
from ...privacy.pld import PLD, compose_plds

Array = TypeVar("Array", np.ndarray, torch.Tensor)
Plan = list[tuple[PrivacyEvent, int]]

RELATION = "replace_one"  # all of DP-VQG, DP-SGD included
PROJECTION_EPS = 1e-8  # Π_R(v) = v·min(1, R/(‖v‖ + PROJECTION_EPS))
FP_STAGE2_SHARE = 0.2  # FP-VQG: ε₁ : ε₂ = 4 : 1
LABEL_SHARE = 0.25  # ε_y = 0.25·ε₂ when labels are private (our choice)
NOT_DP = "not DP: non-private reference (argmin tokens, true labels)"
PUBLIC_LABELS_NOTE = "labels declared public (labels_public ablation): released unprivatized, not covered by epsilon"
_BISECT_RTOL = 1e-9  # mode B: relative width at which the ε₀ bisection stops


# ----------------------------------------------------------------------------- arrays
def _f64(x: np.ndarray | torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """``x`` as a float64 torch tensor (numpy without a copy), optionally on ``device``."""
    t = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
    return t.to(dtype=torch.float64, device=device if device is not None else t.device)


def _like(t: torch.Tensor, like: Array) -> Array:
    """``t`` as the kind of ``like``: a torch tensor, or a numpy array (moved to the CPU)."""
    if isinstance(like, torch.Tensor):
        return t
    return t.detach().cpu().numpy()


def _check_radius(R: float) -> float:
    if isinstance(R, bool) or not (isinstance(R, int | float) and math.isfinite(R) and R > 0):
        raise ValueError(f"the ball radius R must be positive and finite, got {R!r}")
    return float(R)


def _check_shapes(tokens: np.ndarray | torch.Tensor, codes: np.ndarray | torch.Tensor) -> None:
    if tokens.ndim != 3 or codes.ndim != 2 or tokens.shape[-1] != codes.shape[-1]:
        raise ValueError(f"need tokens [n, L, d] and codes [K, d]; got {tuple(tokens.shape)} and {tuple(codes.shape)}")


# ----------------------------------------------------------------------------- the EM on tokens
def project_ball(v: Array, R: float) -> Array:
    """Row-wise projection onto the L2 ball of radius ``R`` (last axis), in float64.

    ``Π_R(v) = v · min(1, R / (‖v‖ + 10⁻⁸))``; ``‖Π_R(v)‖ ≤ R`` always (a point inside the ball
    is unchanged, one outside lands just inside the sphere).  A torch tensor stays on its device.
    """
    t = _f64(v)
    scale = torch.clamp(_check_radius(R) / (torch.linalg.vector_norm(t, dim=-1, keepdim=True) + PROJECTION_EPS), max=1.0)
    return _like(t * scale, v)


def em_utilities(tokens: Array, codes: np.ndarray | torch.Tensor, R: float) -> Array:
    """Utilities ``u_l(k) = −‖Π_R(e_l) − Π_R(c_k)‖²`` ``[n, L, K]`` from tokens ``[n, L, d]`` and codes ``[K, d]``.

    Both tokens and codes are projected with the **same** ``R``, so ``u ∈ [−4R², 0]``; the value
    is computed as ``2ē·c̄ − ‖ē‖² − ‖c̄‖²`` in float64 and clamped into ``[−4R², 0]``, so the
    sensitivity bound ``Δu = 4R²`` holds exactly in floating point too.
    """
    _check_shapes(tokens, codes)
    R = _check_radius(R)
    e = _f64(project_ball(_f64(tokens), R))
    c = _f64(project_ball(_f64(codes), R), e.device)
    u = 2.0 * torch.einsum("nld,kd->nlk", e, c) - (e * e).sum(-1, keepdim=True) - (c * c).sum(-1)
    return _like(torch.clamp(u, min=-4.0 * R * R, max=0.0), tokens)


def em_logits(tokens: Array, codes: np.ndarray | torch.Tensor, eps0: float, R: float) -> Array:
    """EM logits ``ε₀ · u_l(k) / (2Δu)`` with ``Δu = 4R²``, over **all** ``K`` codes, float64 ``[n, L, K]``.

    Sampling ``k ∝ exp(logit)`` is the exponential mechanism (McSherry & Talwar 2007): for any two
    inputs ``e, e'`` (neighbours under ``replace_one``) and every code, ``P(k|e)/P(k|e') ≤ e^{ε₀}``
    because ``|u(e,k) − u(e',k)| ≤ Δu``.  The logits lie in ``[−ε₀/2, 0]`` whatever ``R`` is.
    ``ε₀ = ∞`` is refused (it has no logits): use :func:`argmin_tokens` (not DP), as
    :func:`release_tokens` does.
    """
    if isinstance(eps0, bool) or not (isinstance(eps0, int | float) and 0 < eps0 < math.inf):
        raise ValueError(f"eps0 must be positive and finite (eps0=inf is the non-private argmin_tokens), got {eps0!r}")
    R = _check_radius(R)
    return em_utilities(tokens, codes, R) * (float(eps0) / (2.0 * 4.0 * R * R))


def em_probabilities(logits: np.ndarray | torch.Tensor) -> NDArray[np.float64]:
    """The exact EM law ``P(k) = exp(ℓ_k) / Σ_j exp(ℓ_j)`` over the last axis (float64 softmax, numpy)."""
    return torch.softmax(_f64(logits), dim=-1).detach().cpu().numpy()


def gumbel_noise(uniforms: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise ``−log(−log u)`` in float64 from uniforms in ``(0, 1)``.

    The uniforms are clamped to ``[tiny, 1 − 2⁻⁵³]`` first (a generator in ``[0, 1)`` may return 0),
    so the noise is finite: in ``[−6.57, 36.7]``.
    """
    u = torch.clamp(_f64(uniforms), min=float(np.finfo(np.float64).tiny), max=float(np.nextafter(1.0, 0.0)))
    return -torch.log(-torch.log(u))


def em_sample(logits: np.ndarray | torch.Tensor, uniforms: np.ndarray | torch.Tensor) -> NDArray[np.int64]:
    """One code per location ``[n, L]`` by the Gumbel-max trick: ``argmax_k (ℓ_k + G_k)``, ``G_k = −log(−log U_k)``.

    With independent uniforms ``U_k`` the argmax has law ``softmax(ℓ)`` exactly (Gumbel 1954; e.g.
    Maddison, Tarlow & Minka 2014), i.e. the EM's law (:func:`em_probabilities`).  ``uniforms`` has
    the logits' shape ``[n, L, K]``: one per code, drawn by the caller from
    ``ClientContext.uniform`` so the coins follow the run's randomness mode.  Float64 throughout
    (the logit range ``ε₀/2`` is small; float32 would blur it).
    """
    if tuple(uniforms.shape) != tuple(logits.shape):
        raise ValueError(f"need one uniform per logit: logits {tuple(logits.shape)}, uniforms {tuple(uniforms.shape)}")
    ell = _f64(logits)
    return torch.argmax(ell + gumbel_noise(uniforms).to(ell.device), dim=-1).detach().cpu().numpy().astype(np.int64)


def argmin_tokens(tokens: np.ndarray | torch.Tensor, codes: np.ndarray | torch.Tensor, R: float) -> NDArray[np.int64]:
    """**Not DP** — the non-private reference: the nearest code ``argmin_k ‖Π_R(e_l) − Π_R(c_k)‖²`` ``[n, L]``.

    The limit of the EM as ``ε₀ → ∞`` (the utility's argmax, same projections); used for the
    ``ε = ∞`` reference run and as ``nearest`` in :func:`em_peakedness`.  Never released in a DP run.
    """
    u = _f64(em_utilities(_f64(tokens), codes, R))
    return torch.argmax(u, dim=-1).detach().cpu().numpy().astype(np.int64)


def release_tokens(tokens: np.ndarray | torch.Tensor, codes: np.ndarray | torch.Tensor, eps0: float, R: float,
                   uniforms: np.ndarray | torch.Tensor) -> NDArray[np.int64]:
    """The Stage II token map ``[n, L]``: EM draws at ``ε₀`` (:func:`em_logits`, :func:`em_sample`).

    ``ε₀ = ∞`` (the non-private reference run) returns :func:`argmin_tokens` exactly — **not DP**,
    and the plan says so (:func:`stage2_plan`).
    """
    if eps0 == math.inf:
        return argmin_tokens(tokens, codes, R)
    return em_sample(em_logits(_f64(tokens), codes, eps0, R), uniforms)


# ----------------------------------------------------------------------------- labels: k-ary RR
def _check_classes(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 2:
        raise ValueError(f"randomized response needs an integer number of classes k >= 2, got {k!r}")
    return int(k)


def rr_law(eps_y: float, k: int) -> NDArray[np.float64]:
    """The ``k × k`` transition matrix ``P[y, ỹ]`` of flat ``k``-ary randomized response at ``ε_y``.

    Keep with ``p = e^ε/(e^ε+k−1)``, else a uniform one of the other ``k−1`` labels, each with
    ``q = 1/(e^ε+k−1)``; so ``P[y,y]/P[y',y] = p/q = e^ε`` (Warner, JASA 1965; Kairouz, Oh & Viswanath
    JMLR 2016).  ``ε_y = ∞`` is the identity (true labels, not DP).
    """
    k = _check_classes(k)
    if eps_y == math.inf:
        return np.eye(k)
    _check_positive(eps_y, "eps_y")
    p, q = flat_rr_probabilities(float(eps_y), k)
    return np.full((k, k), q) + np.eye(k) * (p - q)


def rr_labels(y: np.ndarray, eps_y: float, k: int, uniforms: np.ndarray) -> NDArray[np.int64]:
    """``k``-ary randomized response of labels ``y ∈ {0..k−1}`` ``[n]``, deterministic given ``uniforms``.

    Law :func:`rr_law` (pure ``ε_y``-DP).  ``uniforms`` is ``[n]`` (inverse CDF: ``u < p`` keeps,
    otherwise the ``⌊(u−p)/q⌋``-th other label in increasing order) or ``[n, 2]`` (``u₁ < p``
    keeps, otherwise the ``⌊u₂(k−1)⌋``-th other label).  ``ε_y = ∞`` returns the true labels
    (not DP).
    """
    k = _check_classes(k)
    y = np.asarray(y)
    if y.ndim != 1 or (y.size and (y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= k)):
        raise ValueError(f"labels must be a vector of integers in [0, {k}), got shape {y.shape}, dtype {y.dtype}")
    y = y.astype(np.int64)
    if eps_y == math.inf:
        return y.copy()
    _check_positive(eps_y, "eps_y")
    u = np.asarray(uniforms, dtype=np.float64)
    if u.shape not in ((len(y),), (len(y), 2)):
        raise ValueError(f"need uniforms [n] or [n, 2] for n={len(y)} labels, got {u.shape}")
    p, q = flat_rr_probabilities(float(eps_y), k)
    keep = (u if u.ndim == 1 else u[:, 0]) < p
    if u.ndim == 1:
        j = np.floor((u - p) / q) if q > 0 else np.zeros_like(u)
    else:
        j = np.floor(u[:, 1] * (k - 1))
    j = np.clip(np.where(keep, 0, j), 0, k - 2).astype(np.int64)
    other = j + (j >= y)  # the j-th label of {0..k−1} \ {y}
    return np.where(keep, y, other).astype(np.int64)


# ----------------------------------------------------------------------------- budget and accounting
def _check_positive(eps: float, name: str) -> float:
    if isinstance(eps, bool) or not (isinstance(eps, int | float) and eps > 0):  # NaN fails too
        raise ValueError(f"{name} must be positive (inf allowed where stated), got {eps!r}")
    return float(eps)


def split_budget(epsilon: float, variant: str) -> tuple[float, float]:
    """``(ε₁, ε₂)``: the Stage I (DP-SGD) and Stage II (tokens + labels) budgets.

    FP-VQG (``"fp"``): ``ε₁ : ε₂ = 4 : 1``, i.e. ``(0.8ε, 0.2ε)``; PP-VQG (``"pp"``, public
    tokenizer): ``(0, ε)``.  ``ε = ∞`` gives ``(∞, ∞)`` for FP and ``(0, ∞)`` for PP.
    """
    eps = _check_positive(epsilon, "epsilon")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "pp":
        return 0.0, eps
    return eps * (1 - FP_STAGE2_SHARE), eps * FP_STAGE2_SHARE


def label_epsilon(eps2: float, labels: str) -> float:
    """``ε_y``: ``0.25·ε₂`` for private labels (our choice); ``0`` when ``labels="public"`` (an explicitly reported
    ablation: labels are record data, released unprivatized and **not** covered by ε)."""
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
    return 0.0 if labels == "public" else LABEL_SHARE * _check_positive(eps2, "eps2")


def eps0_mode_a(eps2: float, eps_y: float, hw: int) -> float:
    """Mode A: ``ε₀ = (ε₂ − ε_y)/HW``, so ``HW·ε₀ + ε_y = ε₂``: ``(ε₂, 0)``-DP by basic composition."""
    _check_hw(hw)
    if not 0 <= eps_y < _check_positive(eps2, "eps2"):
        raise ValueError(f"need 0 <= eps_y < eps2, got eps_y={eps_y}, eps2={eps2}")
    return (eps2 - eps_y) / hw


def _check_hw(hw: int) -> int:
    if isinstance(hw, bool) or not isinstance(hw, int) or hw < 1:
        raise ValueError(f"HW (token locations per record) must be a positive integer, got {hw!r}")
    return hw


def stage2_plan(eps0: float, hw: int, eps_y: float) -> Plan:
    """The per-record Stage II events as ``[(event, count)]``, for the run's ledger.

    ``HW × ExponentialMechanismEvent(ε₀)`` (one pure ε₀-DP EM draw per location, **recorded with
    its count** ``HW``, composed by the ledger as ``HW``-fold randomized response), then
    ``PureDpEvent(ε_y)`` for the label RR, or a ``PublicDataEvent`` noting public labels when
    ``ε_y = 0``.  Records compose in parallel, so this is the record-level plan.  ``ε₀ = ∞``
    gives one ``NonPrivateEvent`` (the reference run is not DP).
    """
    _check_hw(hw)
    if eps0 == math.inf or eps_y == math.inf:
        return [(NonPrivateEvent(NOT_DP), 1)]
    plan: Plan = [(ExponentialMechanismEvent(_check_positive(eps0, "eps0"), RELATION), hw)]
    if eps_y == 0:
        return plan + [(PublicDataEvent(PUBLIC_LABELS_NOTE), 1)]
    return plan + [(PureDpEvent(_check_positive(eps_y, "eps_y"), RELATION), 1)]


def plan_ledger(plan: Sequence[tuple[PrivacyEvent, int]]) -> PrivacyLedger:
    """A fresh ``replace_one`` :class:`PrivacyLedger` holding ``plan``, each event recorded once **with its count**."""
    ledger = PrivacyLedger(RELATION)
    for event, count in plan:
        ledger.record(event, count, subset="public" if isinstance(event, PublicDataEvent) else "private")
    return ledger


def _ledger_epsilon(plan: Sequence[tuple[PrivacyEvent, int]], delta: float) -> float:
    """The ledger's ε at ``delta`` for ``plan`` (``inf`` where it is too large to account)."""
    try:
        return plan_ledger(plan).epsilon(delta)
    except AccountingLimitError:
        return math.inf


def joint_epsilon(prefix: Sequence[tuple[PrivacyEvent, int]], delta: float) -> Callable[[Plan], float]:
    """``plan ↦`` ε at ``δ`` of ``prefix`` then ``plan``, with the prefix's PLD (e.g. hundreds of DP-SGD rounds)
    composed **once**: for bisections, whose answer is then checked on a real ledger (:func:`_verified`).
    ``inf`` where the composition is too large to account."""
    if not prefix:
        return lambda plan: _ledger_epsilon(plan, delta)
    interval = PrivacyLedger(RELATION).discretization

    def composed(plan: Sequence[tuple[PrivacyEvent, int]]) -> PLD | None:
        return compose_plds((SelfComposedEvent(ev, n).pld(RELATION, interval) for ev, n in plan), interval)

    try:
        head = composed(prefix)
    except AccountingLimitError:
        return lambda plan: _ledger_epsilon([*prefix, *plan], delta)

    def eps(plan: Plan) -> float:
        try:
            tail = composed(plan)
        except AccountingLimitError:
            return math.inf
        return math.inf if head is None or tail is None else max(0.0, float(head.compose(tail).get_epsilon_for_delta(delta)))

    return eps


def _verified(value: float, target: float, plan_at: Callable[[float], Plan], delta: float, rtol: float) -> float:
    """``value`` lowered by factors ``1 − rtol`` until the ledger itself certifies ``plan_at(value)`` at ``target``
    (the search's PLD composes in another order, so it may differ from the ledger's in the last grid step)."""
    for _ in range(100):
        if _ledger_epsilon(plan_at(value), delta) <= target:
            return value
        value *= 1 - rtol
    raise ValueError(f"no value near {value:g} is certified at epsilon={target:g}, delta={delta:g}")


def record_level_epsilon(eps0: float, hw: int, eps_y: float, delta: float, mode: str) -> float:
    """The honest record-level ε of Stage II at per-location ``ε₀`` (the ε₀ sweep's diagnostic).

    Mode A: basic composition ``HW·ε₀ + ε_y`` (pure, δ = 0; the ledger's ``basic_epsilon``).
    Mode B: the ledger's PLD composition of :func:`stage2_plan` at ``delta`` (``replace_one``).
    ``ε₀ = ∞`` or ``ε_y = ∞``: ``∞`` (not DP).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    plan = stage2_plan(eps0, hw, eps_y)
    if mode == "A":
        return plan_ledger(plan).basic_epsilon()
    return _ledger_epsilon(plan, delta)


def eps0_mode_b(target: float, eps_y: float, hw: int, delta: float,
                prefix: Sequence[tuple[PrivacyEvent, int]] = ()) -> tuple[float, float]:
    """Mode B: the largest ``ε₀`` (bisection, relative width 1e-9) whose ledger certifies ``target`` at ``δ``.

    The ledger (``replace_one``) holds ``prefix`` (e.g. FP-VQG's Stage I DP-SGD events, so the
    *joint* ledger certifies the total; empty for Stage II alone) and :func:`stage2_plan`
    (``HW × ε₀``-DP with its count, plus ``ε_y``-DP); its ε is non-decreasing in ``ε₀``.  Returns
    ``(ε₀, certified ε)``, the latter ``≤ target``.  Never below mode A's ``ε₀`` when the ledger
    certifies that one too; raises if even the smallest ``ε₀`` does not fit.
    """
    _check_positive(target, "target")
    if not 0 < delta < 1:
        raise ValueError(f"mode B needs delta in (0, 1), got {delta}")

    joint = joint_epsilon(prefix, delta)

    def eps_at(e0: float) -> float:
        return joint(stage2_plan(e0, hw, eps_y))

    start = eps0_mode_a(target, eps_y, hw) if eps_y < target else target / hw
    lo, hi = (start, 2 * start) if eps_at(start) <= target else (0.0, start)
    for _ in range(64):  # grow hi until it fails (at most ~2^64 × start)
        if lo == 0.0 or eps_at(hi) > target:
            break
        lo, hi = hi, 2 * hi
    for _ in range(200):  # 200 halvings: from ``start`` down to ~1e-60·start when nothing fits
        if hi - lo <= _BISECT_RTOL * hi:
            break
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps_at(mid) <= target else (lo, mid)
    if lo == 0.0:
        raise ValueError(f"no eps0 > 0 meets epsilon={target:g} at delta={delta:g} with HW={hw}, eps_y={eps_y:g} "
                         f"and the given prefix")
    lo = _verified(lo, target, lambda e0: [*prefix, *stage2_plan(e0, hw, eps_y)], delta, 1e-6)
    return lo, _ledger_epsilon([*prefix, *stage2_plan(lo, hw, eps_y)], delta)


@dataclass(frozen=True)
class Stage2Budget:
    """The calibrated Stage II budget of one DP-VQG run (JSON-able via :meth:`report`)."""

    epsilon: float  # the run's total ε
    delta: float
    variant: str  # "fp" | "pp"
    mode: str  # "A" | "B"
    labels: str  # "private" | "public"
    hw: int
    eps1: float  # Stage I (DP-SGD) share; 0 for PP-VQG
    eps2: float  # Stage II record-level target
    eps_y: float  # label RR; 0 when labels are public
    eps0: float  # per-location EM
    certified_epsilon: float  # Stage II alone: mode A basic composition (δ = 0), mode B the ledger at δ
    scale: float = 1.0  # mode A's fill factor s (:func:`fill_mode_a`); 1 before filling

    @property
    def labels_public(self) -> bool:
        return self.labels == "public"

    @property
    def private(self) -> bool:
        """False for the ``ε = ∞`` reference run (argmin tokens, true labels: not DP)."""
        return math.isfinite(self.eps0)

    def plan(self) -> Plan:
        """:func:`stage2_plan` for this budget (record each ``(event, count)`` on the run's ledger)."""
        return stage2_plan(self.eps0, self.hw, self.eps_y)

    def report(self) -> dict[str, Any]:
        """The budget as a JSON-able dict (infinities as ``None``), with the labels' and DP status spelled out."""
        out: dict[str, Any] = {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self).items()}
        out["labels_public"] = self.labels_public
        out["labels_note"] = (PUBLIC_LABELS_NOTE if self.labels_public else "true labels (not DP)" if self.eps_y == math.inf
                              else f"labels privatized by k-ary randomized response at eps_y = {self.eps_y:.6g}")
        out["dp"] = self.private
        if not self.private:
            out["note"] = NOT_DP
        return out


def fill_scale(target: float, delta: float, eps0: float, eps_y: float, hw: int,
               prefix: Sequence[tuple[PrivacyEvent, int]] = (), rtol: float = 1e-4) -> float:
    """Mode A's fill: the largest ``s ≥ 1`` (bisection to relative width ``rtol``) at which the joint ledger of
    ``prefix`` and :func:`stage2_plan` ``(s·ε₀, HW, s·ε_y)`` certifies ``target`` at ``δ``.

    ``s = 1`` is the declared split, ``(target, δ)``-DP by basic composition; the ledger's PLD composes the pure
    draws (and Stage I's DP-SGD events) more tightly than that sum, so ``s > 1`` spends what basic composition
    leaves unspent while keeping the declared ratios (``HW·ε₀ : ε_y``, Stage I's calibration unchanged)."""
    def plan_at(s: float) -> Plan:
        return [*prefix, *stage2_plan(s * eps0, hw, s * eps_y)]

    joint = joint_epsilon(prefix, delta)

    def ok(s: float) -> bool:
        return joint(stage2_plan(s * eps0, hw, s * eps_y)) <= target

    if _ledger_epsilon(plan_at(1.0), delta) > target:
        return 1.0
    lo, hi = 1.0, 2.0
    while ok(hi) and hi < 1e6:
        lo, hi = hi, 2 * hi
    while hi - lo > rtol * lo:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return max(1.0, _verified(lo, target, plan_at, delta, rtol))


def fill_mode_a(budget: Stage2Budget, prefix: Sequence[tuple[PrivacyEvent, int]] = ()) -> Stage2Budget:
    """A mode-A budget scaled by :func:`fill_scale` so that the whole run (``prefix`` then Stage II) certifies
    ``budget.epsilon`` at ``budget.delta``; ``certified_epsilon`` becomes Stage II's ledger ε at ``δ``."""
    if budget.mode != "A" or not budget.private:
        return budget
    s = fill_scale(budget.epsilon, budget.delta, budget.eps0, budget.eps_y, budget.hw, prefix)
    eps0, eps_y = s * budget.eps0, s * budget.eps_y
    return replace(budget, eps0=eps0, eps_y=eps_y, scale=s,
                   certified_epsilon=record_level_epsilon(eps0, budget.hw, eps_y, budget.delta, "B"))


def calibrate_stage2(epsilon: float, delta: float, hw: int, variant: str = "fp", mode: str = "A",
                     labels: str = "private") -> Stage2Budget:
    """Split ``ε`` (:func:`split_budget`), set ``ε_y`` (:func:`label_epsilon`) and calibrate ``ε₀`` (mode A or B).

    ``ε = ∞`` is the non-private reference: ``ε₀ = ε_y = ∞`` (``ε_y = 0`` with public labels), i.e.
    argmin tokens and true labels, certified ε ``∞`` — explicitly not DP, never a NaN.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    _check_hw(hw)
    eps1, eps2 = split_budget(epsilon, variant)
    eps_y = label_epsilon(eps2, labels) if math.isfinite(eps2) else (0.0 if labels == "public" else math.inf)
    if not math.isfinite(eps2):
        eps0, certified = math.inf, math.inf
    elif mode == "A":
        eps0 = eps0_mode_a(eps2, eps_y, hw)
        certified = record_level_epsilon(eps0, hw, eps_y, delta, "A")
    else:
        eps0, certified = eps0_mode_b(eps2, eps_y, hw, delta)
    return Stage2Budget(float(epsilon), delta, variant, mode, labels, hw, eps1, eps2, eps_y, eps0, certified)


# ----------------------------------------------------------------------------- diagnostics
def em_peakedness(probs: np.ndarray, nearest: np.ndarray) -> dict[str, float]:
    """EM peakedness: the mean probability of the nearest code and the mean token entropy.

    ``probs`` ``[n, L, K]`` (:func:`em_probabilities`), ``nearest`` ``[n, L]`` (:func:`argmin_tokens`).
    Returns ``argmin_probability = mean P(nearest)``, ``token_entropy_bits = mean −Σ_k P log₂ P``,
    and the uniform law's values ``1/K`` and ``log₂ K`` for comparison.
    """
    p = np.asarray(probs, dtype=np.float64)
    idx = np.asarray(nearest, dtype=np.int64)
    if p.ndim != 3 or idx.shape != p.shape[:2]:
        raise ValueError(f"need probs [n, L, K] and nearest [n, L], got {p.shape} and {idx.shape}")
    k = p.shape[-1]
    entropy = -np.sum(np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    return {"argmin_probability": float(np.take_along_axis(p, idx[..., None], -1).mean()),
            "token_entropy_bits": float(entropy.mean()), "uniform_probability": 1.0 / k,
            "uniform_entropy_bits": math.log2(k)}


def ideal_argmin_probability(eps0: float, k: int) -> float:
    """The EM's best case: nearest code at distance 0, all others at ``2R``: ``1/(1 + (K−1)e^{−ε₀/2})``."""
    if eps0 == math.inf:
        return 1.0
    return 1.0 / (1.0 + (k - 1) * math.exp(-_check_positive(eps0, "eps0") / 2))


def eps0_for_ideal_probability(p: float, k: int) -> float:
    """The per-location ``ε₀`` at which the best case gives the nearest code probability ``p``: solving
    ``p = e^{ε₀/2}/(e^{ε₀/2} + K − 1)`` gives ``ε₀ = 2 ln(p(K−1)/(1−p))``; ``p = ½`` needs ``2 ln(K−1)``."""
    k = _check_classes(k)
    if not 1 / k < p < 1:
        raise ValueError(f"need 1/K < p < 1 (uniform is 1/K), got p={p!r} with K={k}")
    return 2.0 * math.log(p * (k - 1) / (1 - p))


def feasibility(k: int, hw: int, delta: float, p: float = 0.5) -> dict[str, float]:
    """The feasibility arithmetic of the per-location EM at ``K`` codes and ``HW`` locations: the ``ε₀`` a best-case
    nearest-code probability ``p`` needs (:func:`eps0_for_ideal_probability`), and the record-level ε that implies
    by basic composition ``HW·ε₀`` and by the ledger's PLD at ``δ`` (labels left out)."""
    eps0 = eps0_for_ideal_probability(p, k)
    return {"eps0": eps0, "record_epsilon_basic": hw * eps0,
            "record_epsilon_pld": record_level_epsilon(eps0, hw, 0.0, delta, "B"), "uniform_probability": 1.0 / k}
