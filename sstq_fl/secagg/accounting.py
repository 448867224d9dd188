"""Central privacy of secure aggregation with distributed DDGauss or Skellam noise.

**What is protected.**  The server sees one round's modular sum of ``n`` clients' messages, i.e. the
integer vector ``Σ_i r_i + Z`` with ``Z`` the sum of the ``n`` noise shares (the modular reduction and the
decoding are post-processing).  One round is one privacy event (:func:`round_event`):
:class:`~sstq_fl.privacy.events.DistributedDiscreteGaussianEvent` (Kairouz, Liu & Steinke, ICML 2021,
Thm. 1 and Prop. 14, Eq. 17) or :class:`~sstq_fl.privacy.events.SkellamSumEvent` (Agarwal, Kairouz & Liu,
NeurIPS 2021, Sec. 3), whose docstrings state the RDP bounds.  Their integer-domain bounds are the codec's
rounded norm ``Δ₂`` (:meth:`~.codec.SecAggCodec.rounded_l2`) and ``Δ₁ = Δ₂ min(√d, Δ₂)`` (an integer vector
has ``‖r‖₁ ≤ ‖r‖₂²``; in general ``‖r‖₁ ≤ √d ‖r‖₂``).  Under *add/remove* (one client's vector present or
replaced by 0, the authors' accounting, the default here) those are the sensitivities; under *replace-one*
the events double them.

**Which clients.**  ``clients`` must be the *minimum* number of clients whose noise shares are guaranteed in
the sum (those surviving dropout), never the expected number: the privacy rests on the noise actually
added, and fewer shares means less noise.  No amplification by sampling is taken: in secure aggregation
the server knows each round's participants.

RDP composes additively over rounds (Mironov, CSF 2017, Prop. 1) and converts to ``(ε, δ)`` by
``ε = min_α RDP(α) + log(1 − 1/α) − log(δα)/(α − 1)`` (Canonne, Kamath & Steinke, NeurIPS 2020, Prop. 12).
By default over the ledger's orders :data:`~sstq_fl.privacy.rdp.CURVE_ORDERS`, so that what is calibrated
here is exactly what a run's ledger reports; :data:`REFERENCE_ORDERS` gives the authors' order grid.
"""

from __future__ import annotations

import math

import numpy as np

from ..privacy.events import DistributedDiscreteGaussianEvent, PrivacyEvent, SkellamSumEvent
from ..privacy.rdp import CURVE_ORDERS, curve_epsilon
from .codec import DEFAULT_BETA, SecAggCodec, make_codec

RELATIONS = ("add_or_remove_one", "replace_one")
# The orders the authors' accounting minimizes over (integers 2…128 and 256), for like-for-like comparison.
REFERENCE_ORDERS = np.array([*range(2, 129), 256], dtype=float)


def round_event(codec: SecAggCodec, clients: int) -> PrivacyEvent:
    """The privacy event of one round summing ``clients`` clients' shares of ``codec`` (module docstring)."""
    l2 = codec.rounded_l2()
    l1 = l2 * min(math.sqrt(codec.padded), l2)
    if codec.noise == "skellam":
        return SkellamSumEvent(local_variance=codec.local_stddev**2, clients=int(clients), l2_bound=l2, l1_bound=l1)
    return DistributedDiscreteGaussianEvent(local_stddev=codec.local_stddev, clients=int(clients), l2_bound=l2,
                                            l1_bound=l1, dim=codec.padded)


def rdp(codec: SecAggCodec, clients: int, orders: np.ndarray, relation: str = "add_or_remove_one") -> np.ndarray:
    """One round's RDP at ``orders``: :func:`round_event`'s curve."""
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return np.asarray(round_event(codec, clients).rdp_curve(relation, np.asarray(orders, dtype=float)), dtype=float)


def _conversion(orders: np.ndarray, curve: np.ndarray, delta: float) -> np.ndarray:
    """``RDP(α) + log(1 − 1/α) − log(δα)/(α − 1)`` per order, ``0`` where ``δ² ≥ 1 − e^{−RDP(α)}`` (the KL
    divergence ``≤ RDP(α)`` bounds the total variation distance; Canonne, Kamath & Steinke, NeurIPS 2020,
    Prop. 12, with the small-divergence case as tensorflow-privacy's converter)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        eps = curve + np.log1p(-1 / orders) - np.log(delta * orders) / (orders - 1)
        small = delta**2 + np.expm1(-curve) >= 0
    return np.where(small, 0.0, np.where(np.isnan(eps), math.inf, eps))


def epsilon_from_rdp(orders: np.ndarray, curve: np.ndarray, delta: float) -> float:
    """``ε`` at ``delta`` from an RDP curve given at ``orders`` (all > 1): the least conversion over them."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return max(0.0, float(np.min(_conversion(np.asarray(orders, float), np.asarray(curve, float), delta))))


def central_epsilon(
    codec: SecAggCodec, clients: int, rounds: int, delta: float, relation: str = "add_or_remove_one",
    orders: np.ndarray | None = None,
) -> float:
    """``ε`` at ``delta`` of ``rounds`` rounds, each the sum of ``clients`` (the guaranteed minimum) noise
    shares, with no sampling amplification: RDP ``rounds · RDP(α)`` converted by Canonne, Kamath & Steinke
    (NeurIPS 2020, Prop. 12).  Without ``orders``: over the ledger's
    :data:`~sstq_fl.privacy.rdp.CURVE_ORDERS` (:func:`~sstq_fl.privacy.rdp.curve_epsilon`, what a run reports);
    with ``orders`` (e.g. :data:`REFERENCE_ORDERS`): the least conversion over exactly those."""
    if rounds < 0 or clients < 1:
        raise ValueError(f"rounds must be >= 0 and clients >= 1, got {rounds}, {clients}")
    if rounds == 0:
        return 0.0
    if orders is not None:
        return epsilon_from_rdp(orders, rounds * rdp(codec, clients, orders, relation), delta)
    return curve_epsilon(rounds * rdp(codec, clients, CURVE_ORDERS, relation), delta)


def max_local_stddev(bits: int, expected_clients: int, k_stddevs: float) -> float:
    """The supremum of σ for which :func:`~.codec.make_codec` has room: ``(2^b/(2k))² = n (1/4 + σ²)``."""
    sq = (2.0**bits / (2 * k_stddevs)) ** 2 / expected_clients - 0.25
    return math.sqrt(sq) if sq > 0 else 0.0


def calibrate(
    target_epsilon: float, delta: float, rounds: int, clients: int, dim: int, clip: float, bits: int,
    noise: str = "ddgauss", k_stddevs: float = 4.0, beta: float = DEFAULT_BETA,
    relation: str = "add_or_remove_one", expected_clients: int | None = None, orders: np.ndarray | None = None,
) -> SecAggCodec:
    """The codec with the smallest ``local_stddev`` σ whose :func:`central_epsilon` over ``rounds`` rounds of
    ``clients`` clients is ``≤ target_epsilon`` at ``delta``; the grid step is re-derived for every candidate
    σ by :func:`~.codec.make_codec` (for ``expected_clients``, default ``clients``), as the authors'
    parameter search does.  ``clients`` is the minimum number of surviving clients the caller guarantees;
    accounting with it is conservative.  ``orders`` as in :func:`central_epsilon`.  ``ε`` falls as σ grows
    (γ grows, so ``Δ₂ = rounded_l2`` shrinks, and ``τ`` falls), so bisection on ``log σ`` over ``(0, σ_max)``
    finds it."""
    n_scale = int(expected_clients if expected_clients is not None else clients)

    def eps_at(sigma: float) -> float:
        codec = make_codec(dim, clip, bits, noise, sigma, n_scale, k_stddevs, beta)
        return central_epsilon(codec, clients, rounds, delta, relation, orders)

    hi = max_local_stddev(bits, n_scale, k_stddevs) * (1 - 1e-9)
    if not (target_epsilon > 0 and hi > 0 and eps_at(hi) <= target_epsilon):
        raise ValueError(
            f"epsilon {target_epsilon:g} is unreachable with bits={bits}, {clients} clients, {rounds} rounds "
            f"(the least is {eps_at(hi) if hi > 0 else math.inf:.4g} at the largest noise that fits the field)"
        )
    lo = min(0.5, hi / 2) if noise == "ddgauss" else hi * 1e-9
    if eps_at(lo) <= target_epsilon:
        return make_codec(dim, clip, bits, noise, lo, n_scale, k_stddevs, beta)
    while hi / lo - 1 > 1e-10:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps_at(mid) <= target_epsilon else (mid, hi)
    return make_codec(dim, clip, bits, noise, hi, n_scale, k_stddevs, beta)


def expected_mse(codec: SecAggCodec, clients: int) -> float:
    """``E ‖ŝ − Σ_i clip(x_i)‖₂²`` over the ``dim`` output coordinates of the decoded sum of ``clients``
    clients, without wrap-around: ``dim · n · γ² (v + 1/4)`` with ``v`` one share's per-coordinate noise
    variance (:meth:`~.codec.SecAggCodec.noise_variance`).  The noise term is exact (the inverse rotation is
    orthonormal, so the noise stays i.i.d. with variance ``nvγ²`` per coordinate); the rounding term is the
    paper's bound ``p(1 − p) ≤ 1/4`` per coordinate (Kairouz, Liu & Steinke, ICML 2021, Sec. 4.2 and 4.4,
    the ``γ²/4 + σ²`` there), exact for unconditional rounding when every fractional part is 1/2."""
    n = int(clients)
    return codec.dim * n * codec.scale**2 * (codec.noise_variance() + 0.25)
