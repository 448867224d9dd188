"""Distributed noise under secure aggregation: each client adds a share of discrete noise to its integer vector
and the server learns only the (modular) sum.  Both events are published as Rényi-DP bounds, so a ledger that
holds one composes by RDP (``accounted_by = "rdp"``).

Quantities are in the integer domain the clients send: a client's contribution (scaled, rotated and rounded) has
L2 norm at most ``l2_bound`` and L1 norm at most ``l1_bound``; ``clients`` is the number of noise shares in the
sum (the least number of surviving clients the protocol guarantees: fewer shares would be less noise, so a round
is charged for its guaranteed minimum).  Neighbouring sums differ by one client's contribution (add or remove one:
sensitivities ``l2_bound``, ``l1_bound``) or by the difference of two (replace one: twice those, by the triangle
inequality).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedEventError
from ..pld import PLD
from .base import PrivacyEvent, check_positive, check_relation


def _sensitivities(relation: str, l2: float, l1: float) -> tuple[float, float]:
    """``(Δ₂, Δ₁)`` of one client's contribution under ``relation``."""
    check_relation(relation)
    k = 2.0 if relation == "replace_one" else 1.0
    return k * l2, k * l1


def _check_clients(clients: int) -> None:
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients must be a positive integer, got {clients!r}")


class _RdpOnly(PrivacyEvent):
    """Shared accounting of the RDP-published events: no PLD, no dp-accounting cross-check."""

    accounted_by = "rdp"

    def pld(self, relation: str, interval: float) -> PLD | None:
        raise UnsupportedEventError(f"a {self.kind} event is published as an RDP bound: it is composed by RDP, "
                                    f"not by a privacy-loss distribution")

    def validate(self, relation: str, interval: float) -> None:
        """Refuse an unknown relation, or parameters whose curve is nowhere finite."""
        curve = self.rdp_curve(relation, np.array([2.0, 8.0, 64.0]))
        if not np.all(np.isfinite(curve)):
            raise ValueError(f"{self.kind} event {self.to_json()}: its RDP bound is not finite")


@dataclass(frozen=True)
class DistributedDiscreteGaussianEvent(_RdpOnly, kind="distributed_discrete_gaussian"):
    """The sum of ``clients`` vectors each carrying independent discrete Gaussian noise ``N_Z(0, σ²)`` per
    coordinate (``σ = local_stddev``), in ``dim`` coordinates (Kairouz, Liu & Steinke, ICML 2021).

    The sum of ``n`` discrete Gaussians is close to ``N_Z(0, nσ²)``: with
    ``τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ² k/(k+1))`` (their Thm. 1) and ``s₂ = Δ₂/(√n σ)``, ``s₁ = Δ₁/(√n σ)``, the
    mechanism satisfies RDP of order ``α`` with (their Prop. 14, Eq. 17)
    ``ε(α) = min(α s₂²/2 + τ d, α (s₂² + 2 s₁ τ + τ² d)/2, α (s₂ + τ √d)²/2)``.
    Valid at every real order ``α > 1`` for ``σ ≥ 1/2`` (infinite below, where Thm. 1 is not stated).
    Rounds compose additively in RDP; Poisson sampling is not combined with it (under secure aggregation the
    server runs the protocol and knows each round's participants).
    """

    local_stddev: float
    clients: int
    l2_bound: float
    l1_bound: float
    dim: int

    def __post_init__(self) -> None:
        for name in ("local_stddev", "l2_bound", "l1_bound"):
            check_positive(name, getattr(self, name))
        _check_clients(self.clients)
        _check_clients(self.dim)

    def tau(self) -> float:
        """The inflation ``τ`` of Kairouz et al., Thm. 1 (0 for one client)."""
        k = np.arange(1, self.clients, dtype=float)
        return float(10 * np.exp(-2 * math.pi**2 * self.local_stddev**2 * k / (k + 1)).sum())

    def rdp_curve(self, relation: str, orders: np.ndarray) -> np.ndarray:
        d2, d1 = _sensitivities(relation, self.l2_bound, self.l1_bound)
        if self.local_stddev < 0.5:  # Thm. 1 is stated for σ ≥ 1/2 only
            return np.full(np.shape(orders), np.inf)
        root = math.sqrt(self.clients) * self.local_stddev
        s2, s1, tau, d = d2 / root, d1 / root, self.tau(), self.dim
        a = np.asarray(orders, dtype=float)
        return np.minimum.reduce([a * s2**2 / 2 + tau * d, a * (s2**2 + 2 * s1 * tau + tau**2 * d) / 2,
                                  a * (s2 + tau * math.sqrt(d)) ** 2 / 2])


@dataclass(frozen=True)
class SkellamSumEvent(_RdpOnly, kind="skellam_sum"):
    """The sum of ``clients`` vectors each carrying independent Skellam noise ``Sk(λ, λ)`` of variance
    ``local_variance = 2λ`` per coordinate: the sum carries ``Sk`` of variance ``μ = n · local_variance``
    (Agarwal, Kairouz & Liu, NeurIPS 2021).  RDP of integer order ``α > 1`` (their Thm. 3.5 / Cor. 3.6):
    ``ε(α) = α Δ₂²/(2μ) + min(((2α − 1)Δ₂² + 6Δ₁)/(4μ²), 3Δ₁/(2μ))``; infinite at non-integer orders, where
    the bound is not stated.  Rounds compose additively; no sampling amplification (as for the discrete
    Gaussian sum)."""

    local_variance: float
    clients: int
    l2_bound: float
    l1_bound: float

    def __post_init__(self) -> None:
        for name in ("local_variance", "l2_bound", "l1_bound"):
            check_positive(name, getattr(self, name))
        _check_clients(self.clients)

    def rdp_curve(self, relation: str, orders: np.ndarray) -> np.ndarray:
        d2, d1 = _sensitivities(relation, self.l2_bound, self.l1_bound)
        mu = self.clients * self.local_variance
        a = np.asarray(orders, dtype=float)
        eps = a * d2**2 / (2 * mu) + np.minimum(((2 * a - 1) * d2**2 + 6 * d1) / (4 * mu**2), 3 * d1 / (2 * mu))
        return np.where(a == np.floor(a), eps, np.inf)
