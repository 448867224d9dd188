"""Record-level DP sums through secure aggregation with distributed discrete noise.

The codec of :mod:`.codec` protects *clients* (one client's clipped vector present or not).  The DP generative
pipelines protect *records*: client ``i`` holds many records and sends ``x_i = Σ_{r ∈ D_i} φ(r)``, the sum of its
records' contributions, each bounded on the client, so that one record changes the total by at most ``Δ`` in L2
(the release's shift: ``2B`` or a tighter declared one under replace-one, ``B`` under add/remove, with ``B`` the
per-record bound).  This module reuses the codec's rotation, scale, noise and modular arithmetic and replaces its
rounding, so that the sensitivity of the *integer* message to one record is bounded:

1. clip ``x_i`` to the aggregate bound ``S = N_decl·B`` (never active for a client holding at most ``N_decl``
   records; a projection onto a ball is 1-Lipschitz, so it cannot raise the sensitivity), zero-pad to
   ``p = 2^⌈log₂ d⌉``, rotate by the round's public randomized Hadamard transform and scale by ``1/γ``:
   ``v_i = H D x_i / (√p γ)``;
2. **error-conditioned randomized rounding**: each coordinate rounds up with probability its fractional part
   (unbiased), and the whole draw is repeated until the rounding error ``e = round(v) − v`` satisfies
   ``‖e‖₂ ≤ E_β``, ``E_β² = p/4 + √(p·ln(1/β)/2)``.  Each ``e_j² ∈ [0, 1]`` has mean ``f_j(1 − f_j) ≤ 1/4`` and
   the ``e_j`` are independent, so Hoeffding's inequality gives ``P(‖e‖² ≥ p/4 + t) ≤ exp(−2t²/p)``: a draw is
   rejected with probability at most ``β``.  (Kairouz, Liu & Steinke, "The Distributed Discrete Gaussian
   Mechanism for Federated Learning with Secure Aggregation", ICML 2021, Sec. 4, condition the *rounded norm*
   ``‖round(v)‖``; conditioning the *error* instead is what bounds the difference of two neighbours' messages
   independently of where ``v`` lies.);
3. add the client's own share ``z_i`` of discrete Gaussian noise ``N_Z(0, σ²)`` (or Skellam ``Sk(σ²)``) per
   coordinate from its own coins, and send ``y_i = (round(v_i) + z_i) mod m``, ``m = 2^bits``.

**Sensitivity.**  Neighbouring record sets change one client's ``x_i`` by ``‖Δx‖₂ ≤ Δ``; the rotation is
orthonormal, so ``‖v_i − v_i'‖₂ ≤ Δ/γ``, and ``round(v) − round(v') = (v − v') + (e − e')``, hence every pair
of messages the two record sets can produce satisfies ``‖round(v_i) − round(v_i')‖₂ ≤ Δ/γ + 2E_β =: Δ₂``; the
difference is an integer vector, so ``‖·‖₁ ≤ min(√p Δ₂, Δ₂²) =: Δ₁`` (``|c| ≤ c²`` for an integer ``c``).  The
server learns ``Σ_i round(v_i) + Σ_i z_i mod m``; since the bound holds for *every* pair of rounding outcomes,
the joint convexity of ``exp((α − 1) D_α)`` carries the Rényi bound of the fixed-signal mechanism over to the
mixture over rounding draws, and the modular reduction and the decoding are post-processing.  So one release is
:class:`~sstq_fl.privacy.events.DistributedDiscreteGaussianEvent` with sensitivities ``(Δ₂, Δ₁)`` under the
release's relation, for the ``n`` clients whose shares the sum is guaranteed to contain (Kairouz, Liu & Steinke,
Thm. 1 and Prop. 14).  That event takes **one** contribution's bounds and doubles them itself under replace-one
(:mod:`sstq_fl.privacy.events.distributed`), so :meth:`RecordSecAgg.event` passes ``Δ₂/2`` and ``Δ₁/2`` there (the
replace-one ``Δ₂`` above already is the full difference) and ``Δ₂``, ``Δ₁`` under add/remove.

**Bias.**  Conditioning makes the rounding slightly biased (the authors note the same for their conditional
rounding).  With ``A`` the acceptance event, ``P(Aᶜ) = β' ≤ β`` and ``E[e] = 0``:
``E[e | A] = −E[e·1_{Aᶜ}]/P(A)``, and for a unit vector ``u``, ``|E[⟨u, e⟩ 1_{Aᶜ}]| ≤ √(E⟨u, e⟩²)·√β' ≤ √β'/2``
(Cauchy–Schwarz, ``E⟨u, e⟩² = Σ u_j² f_j(1 − f_j) ≤ 1/4``).  So ``‖E[e | A]‖₂ ≤ √β/(2(1 − β))`` per client on the
integer grid (:func:`rounding_bias_bound`), ``γ`` times that after decoding (the inverse rotation is orthonormal):
with the default ``β = 10⁻⁶`` and ``γ ≈ 10⁻⁷``, about ``5·10⁻¹¹`` per client against a noise std of order 1.

**Field size.**  ``γ`` is chosen so that the integer aggregate does not wrap around ``m`` except with probability
at most ``P_wrap`` (default ``10⁻⁹``): a coordinate of the rotated aggregate signal exceeds ``k·S/√p`` with
probability at most ``2e^{−k²/2}`` over the random signs (Hoeffding), the noise sum (``nσ²``-sub-Gaussian for the
discrete Gaussian, Canonne, Kamath & Steinke, NeurIPS 2020) exceeds ``k√n σ`` with probability at most
``2e^{−k²/2}``, and the rounding moves the sum by less than ``n``; with ``k = √(2 ln(4p/P_wrap))`` a union bound
over the ``p`` coordinates gives ``P_wrap``.  Hence ``m/2 − 1 − n ≥ k(S/(γ√p) + √n σ)``, i.e.
``γ = kS/√p / (m/2 − 1 − n − k√n σ)``.  (The paper's heuristic fits ``k = 4`` standard deviations; with
``p ≈ 2^18`` coordinates and one release, ``k = 4`` would leave a wrapped coordinate likely in the worst case.)
The ε does not depend on the choice: the rounding term ``2E_β`` is ``10⁻⁵`` of ``Δ/γ`` here.

**Calibration.**  :func:`calibrate_releases` finds the local ``σ`` of every release of a pipeline's plan so that
the plan's RDP composition (the ledger's own, :class:`~sstq_fl.privacy.ledger.PrivacyLedger`) meets the target
``(ε, δ)`` under the pipeline's relation: one common noise multiplier ``z = √n σ / Δ₂`` for all releases, bisected.

Everything here is numpy; the secret randomness comes from the client's ``numpy.random.Generator``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..privacy.events import RELATIONS, DistributedDiscreteGaussianEvent, PrivacyEvent, SkellamSumEvent
from .codec import NOISES, SecAggCodec, padded_dim

DEFAULT_BITS = 32
"""Bits of the field ``Z_m`` (the codec allows up to 62; the sums over thousands of records need more than 16)."""
DEFAULT_BETA = 1e-6
"""β of the error-conditioned rounding: a draw is rejected with probability at most β."""
WRAP_PROBABILITY = 1e-9
"""The probability the field size allows for any coordinate of the aggregate to wrap around ``m``."""
MAX_ROUNDING_TRIES = 1000
"""Redraws of the conditioned rounding before the client gives up (each is rejected with probability ≤ β)."""


def rounding_error_bound(padded: int, beta: float) -> float:
    """``E_β = √(p/4 + √(p·ln(1/β)/2))``: the L2 bound the conditioned rounding error keeps (module docstring)."""
    if not 0 < beta < 1:
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    p = int(padded)
    return math.sqrt(p / 4 + math.sqrt(p * math.log(1 / beta) / 2))


def rounding_bias_bound(beta: float) -> float:
    """``√β/(2(1 − β))``: the L2 norm of the bias of one client's conditioned rounding, on the integer grid."""
    return math.sqrt(beta) / (2 * (1 - beta))


def wrap_stddevs(padded: int, wrap_probability: float = WRAP_PROBABILITY) -> float:
    """``k = √(2 ln(4p/P_wrap))``: the margin that keeps every coordinate in the field but with probability
    ``P_wrap`` (module docstring)."""
    if not 0 < wrap_probability < 1:
        raise ValueError(f"wrap probability must be in (0, 1), got {wrap_probability}")
    return math.sqrt(2 * math.log(4 * int(padded) / wrap_probability))


def round_conditioned(v: np.ndarray, bound: float, coins: np.random.Generator,
                      tries: int = MAX_ROUNDING_TRIES) -> np.ndarray:
    """Unbiased randomized rounding of ``v`` (``⌊v⌋ + Bernoulli(v − ⌊v⌋)`` per coordinate), redrawn until the
    error ``round(v) − v`` has L2 norm ``≤ bound``; int64.  Uniforms from ``coins``, ``v.size`` per attempt."""
    v = np.asarray(v, dtype=np.float64)
    floor = np.floor(v)
    frac = v - floor  # exact: floor ≤ v < floor + 1
    limit = bound * bound
    for _ in range(tries):
        up = coins.random(v.size) < frac
        err = up - frac
        if float(np.dot(err, err)) <= limit:
            return (floor + up).astype(np.int64)
    raise RuntimeError(f"error-conditioned rounding: no draw within the error bound in {tries} tries")


@dataclass(frozen=True)
class RecordSecAgg:
    """One record-level release through secure aggregation: the codec (its ``clip`` is the aggregate bound
    ``S``, its ``beta`` the rounding's β), the release's L2 ``shift`` under ``relation`` (what one record changes
    one client's sum by), and ``clients``, the number of noise shares the sum is guaranteed to contain."""

    codec: SecAggCodec
    shift: float
    relation: str
    clients: int

    def __post_init__(self) -> None:
        if not (self.shift > 0 and math.isfinite(self.shift)):
            raise ValueError(f"shift must be finite and > 0, got {self.shift}")
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        if isinstance(self.clients, bool) or not isinstance(self.clients, int) or self.clients < 1:
            raise ValueError(f"clients must be a positive integer, got {self.clients!r}")
        if not 0 < self.codec.beta < 1:
            raise ValueError(f"the conditioned rounding needs 0 < beta < 1, got {self.codec.beta}")
        if self.codec.noise == "ddgauss" and self.codec.local_stddev < 0.5:
            raise ValueError(f"the discrete Gaussian sum's RDP bound needs local_stddev >= 1/2, got "
                             f"{self.codec.local_stddev}")

    # ------------------------------------------------------------------ accounting
    @property
    def padded(self) -> int:
        return self.codec.padded

    def error_bound(self) -> float:
        """``E_β`` in the padded dimension."""
        return rounding_error_bound(self.padded, self.codec.beta)

    def sensitivity(self) -> tuple[float, float]:
        """``(Δ₂, Δ₁)``: the L2 and L1 bounds of the difference of two neighbouring messages on the integer grid,
        ``Δ₂ = shift/γ + 2E_β`` and ``Δ₁ = min(√p Δ₂, Δ₂²)``, under the release's relation."""
        l2 = self.shift / self.codec.scale + 2 * self.error_bound()
        return l2, min(math.sqrt(self.padded) * l2, l2 * l2)

    def event(self) -> PrivacyEvent:
        """The release's privacy event: one contribution's bounds, i.e. ``(Δ₂, Δ₁)/2`` under replace-one (the
        event doubles them) and ``(Δ₂, Δ₁)`` under add/remove."""
        l2, l1 = self.sensitivity()
        half = 2.0 if self.relation == "replace_one" else 1.0
        if self.codec.noise == "skellam":
            return SkellamSumEvent(local_variance=self.codec.local_stddev**2, clients=self.clients,
                                   l2_bound=l2 / half, l1_bound=l1 / half)
        return DistributedDiscreteGaussianEvent(local_stddev=self.codec.local_stddev, clients=self.clients,
                                                l2_bound=l2 / half, l1_bound=l1 / half, dim=self.padded)

    def noise_multiplier(self) -> float:
        """``z = √n σ / Δ₂``: the aggregate noise std in units of the message sensitivity."""
        return math.sqrt(self.clients) * self.codec.local_stddev / self.sensitivity()[0]

    def central_stddev(self, shares: int | None = None) -> float:
        """The std of the decoded sum's noise per coordinate, in the sums' own units: ``γ·√(n·Var(share))`` for
        ``shares`` shares (default: the guaranteed ``clients``)."""
        n = self.clients if shares is None else int(shares)
        return self.codec.scale * math.sqrt(n * self.codec.noise_variance())

    def bias_bound(self, shares: int | None = None) -> float:
        """The L2 norm of the decoded sum's bias from the conditioning: ``n·γ·√β/(2(1 − β))``."""
        n = self.clients if shares is None else int(shares)
        return n * self.codec.scale * rounding_bias_bound(self.codec.beta)

    # ------------------------------------------------------------------ the protocol
    def encode(self, x: np.ndarray, round_seed: int, coins: np.random.Generator) -> np.ndarray:
        """One client's share of its float sum ``x`` (``[dim]``): clip to the aggregate bound, rotate by the
        public ``round_seed``, scale, round conditioned on the error, add the noise share from ``coins`` (the
        client's own), reduce mod ``m``; int64 ``[p]`` in ``[0, m)``."""
        c = self.codec
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        if x.shape != (c.dim,) or not np.all(np.isfinite(x)):
            raise ValueError(f"encode: expected a finite float vector of length {c.dim}, got shape {x.shape}")
        v = c.rotate(c.clip_rows(x[None, :]), round_seed)[0] / c.scale
        rounded = round_conditioned(v, self.error_bound(), coins)
        return np.mod(rounded + c.noise_row(coins), c.modulus).astype(np.int64)

    def modular_sum(self, shares: np.ndarray) -> np.ndarray:
        """What secure aggregation reveals: the shares' sum mod ``m`` (int64 ``[p]``)."""
        return self.codec.modular_sum(shares)

    def decode(self, modsum: np.ndarray, round_seed: int) -> np.ndarray:
        """The noisy sum (float64 ``[dim]``): centre, ``×γ``, rotate back, drop the padding."""
        return self.codec.decode_sum(modsum, round_seed)

    # ------------------------------------------------------------------ transport
    def to_json(self) -> dict[str, Any]:
        return {"codec": asdict(self.codec), "shift": self.shift, "relation": self.relation, "clients": self.clients}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RecordSecAgg:
        """The release a request names (``ValueError`` for a malformed one)."""
        try:
            codec = dict(d["codec"])
            fields = {"dim": int, "clip": float, "bits": int, "scale": float, "local_stddev": float, "noise": str,
                      "beta": float}
            if set(codec) != set(fields):
                raise ValueError(f"codec fields must be {sorted(fields)}, got {sorted(codec)}")
            return cls(SecAggCodec(**{k: t(codec[k]) for k, t in fields.items()}), float(d["shift"]),
                       str(d["relation"]), int(d["clients"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed secure-aggregation release: {exc!r}") from None

    def notes(self) -> dict[str, Any]:
        """What a transcript line and metrics record of the release."""
        l2, l1 = self.sensitivity()
        c = self.codec
        return {"noise": c.noise, "bits": c.bits, "scale": c.scale, "local_stddev": c.local_stddev, "dim": c.dim,
                "padded": c.padded, "beta": c.beta, "aggregate_bound": c.clip, "shift": self.shift,
                "relation": self.relation, "clients": self.clients, "l2_sensitivity": l2, "l1_sensitivity": l1,
                "rounding_error_bound": self.error_bound(), "noise_multiplier": self.noise_multiplier(),
                "central_stddev": self.central_stddev(), "bias_bound": self.bias_bound()}


# ----------------------------------------------------------------------------- construction and calibration
def _room(bits: int, clients: int) -> float:
    return 2.0 ** (bits - 1) - 1 - clients


def make_release(dim: int, shift: float, aggregate_bound: float, clients: int, local_stddev: float,
                 relation: str, bits: int = DEFAULT_BITS, noise: str = "ddgauss", beta: float = DEFAULT_BETA,
                 k_stddevs: float | None = None) -> RecordSecAgg:
    """The release whose grid step ``γ = kS/√p / (m/2 − 1 − n − k√n σ)`` keeps the aggregate in the field but with
    probability :data:`WRAP_PROBABILITY` (``k`` from :func:`wrap_stddevs` unless given; module docstring)."""
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    if not (aggregate_bound > 0 and math.isfinite(aggregate_bound)):
        raise ValueError(f"aggregate bound must be finite and > 0, got {aggregate_bound}")
    p, n = padded_dim(dim), int(clients)
    k = wrap_stddevs(p) if k_stddevs is None else float(k_stddevs)
    room = _room(bits, n) - k * math.sqrt(n) * local_stddev
    if not room > 0:
        raise ValueError(f"bits={bits} is too small for {n} noise shares of local_stddev {local_stddev:g} at "
                         f"{k:.3g} standard deviations; raise bits")
    gamma = k * aggregate_bound / math.sqrt(p) / room
    codec = SecAggCodec(dim=int(dim), clip=float(aggregate_bound), bits=int(bits), scale=gamma,
                        local_stddev=float(local_stddev), noise=noise, beta=float(beta))
    return RecordSecAgg(codec, float(shift), relation, n)


@dataclass(frozen=True)
class SumSpec:
    """A planned additive release: the flattened ``dim``, its L2 ``shift`` under the plan's relation and the
    aggregate bound ``S`` (at most ``N_decl`` times the per-record bound)."""

    dim: int
    shift: float
    aggregate_bound: float


def release_at(spec: SumSpec, z: float, clients: int, relation: str, bits: int = DEFAULT_BITS,
               noise: str = "ddgauss", beta: float = DEFAULT_BETA) -> RecordSecAgg:
    """The release of ``spec`` whose noise multiplier ``√n σ / Δ₂`` is ``z``: with ``a = shift·√p/(kS)`` and
    ``R = m/2 − 1 − n``, ``Δ₂ = a(R − k√n σ) + 2E_β`` is linear in ``σ``, so ``√n σ = z(aR + 2E_β)/(1 + zak)``."""
    p, n = padded_dim(spec.dim), int(clients)
    k, e = wrap_stddevs(p), rounding_error_bound(p, beta)
    a, r = spec.shift * math.sqrt(p) / (k * spec.aggregate_bound), _room(bits, n)
    sigma = z * (a * r + 2 * e) / (1 + z * a * k) / math.sqrt(n)
    return make_release(spec.dim, spec.shift, spec.aggregate_bound, n, sigma, relation, bits, noise, beta, k)


def plan_epsilon(releases: Sequence[RecordSecAgg], delta: float, relation: str,
                 others: Sequence[tuple[PrivacyEvent, int]] = ()) -> float:
    """ε at ``delta`` of the releases (and ``others``) on a fresh ledger under ``relation``, as the run's ledger
    will compose them (by RDP: the events are published as RDP bounds)."""
    from ..privacy.ledger import PrivacyLedger

    led = PrivacyLedger(relation)
    for ev, count in [*((r.event(), 1) for r in releases), *others]:
        led.record(ev, count)
    return led.epsilon(delta)


def calibrate_releases(epsilon: float, delta: float, relation: str, specs: Sequence[SumSpec], clients: int,
                       bits: int = DEFAULT_BITS, noise: str = "ddgauss", beta: float = DEFAULT_BETA,
                       rtol: float = 1e-6) -> list[RecordSecAgg]:
    """The releases of ``specs`` (each once) with one common noise multiplier ``z``, the least whose plan is
    ``(epsilon, delta)``-DP on the ledger under ``relation`` (bisection on ``log z`` to ``rtol``): the returned
    plan's ε is ``≤ epsilon`` and, at the tolerance, equal to it."""
    if not (epsilon > 0 and math.isfinite(epsilon) and 0 < delta < 1):
        raise ValueError(f"need a finite epsilon > 0 and 0 < delta < 1, got {epsilon}, {delta}")
    if not specs:
        raise ValueError("no release to calibrate")

    def plan(z: float) -> list[RecordSecAgg]:
        return [release_at(s, z, clients, relation, bits, noise, beta) for s in specs]

    def eps(z: float) -> float:
        try:
            return plan_epsilon(plan(z), delta, relation)
        except ValueError:  # σ below 1/2: no stated bound
            return math.inf

    lo, hi = 1e-3, 1.0
    while eps(hi) > epsilon:
        lo, hi = hi, hi * 4
        if hi > 1e8:
            raise ValueError(f"epsilon {epsilon:g} is unreachable with bits={bits} and {clients} clients")
    while hi / lo - 1 > rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps(mid) <= epsilon else (mid, hi)
    return plan(hi)


# ----------------------------------------------------------------------------- flattening
def flatten(arrays: Mapping[str, np.ndarray], shapes: Mapping[str, Sequence[int]]) -> np.ndarray:
    """The arrays, in sorted key order, as one float64 vector; their keys and shapes must be ``shapes``'s exactly."""
    if set(arrays) != set(shapes):
        raise ValueError(f"expected the arrays {sorted(shapes)}, got {sorted(arrays)}")
    parts = []
    for k in sorted(shapes):
        a = np.asarray(arrays[k], dtype=np.float64)
        if a.shape != tuple(int(s) for s in shapes[k]):
            raise ValueError(f"array {k!r}: expected shape {tuple(shapes[k])}, got {a.shape}")
        parts.append(a.reshape(-1))
    return np.concatenate(parts)


def unflatten(vector: np.ndarray, shapes: Mapping[str, Sequence[int]]) -> dict[str, np.ndarray]:
    """The inverse of :func:`flatten`."""
    out, at = {}, 0
    for k in sorted(shapes):
        shape = tuple(int(s) for s in shapes[k])
        size = math.prod(shape)
        out[k] = np.asarray(vector[at:at + size], dtype=np.float64).reshape(shape)
        at += size
    if at != len(vector):
        raise ValueError(f"vector of length {len(vector)} does not match the shapes (total {at})")
    return out


def flat_dim(shapes: Mapping[str, Sequence[int]]) -> int:
    """The length of :func:`flatten`'s vector for ``shapes``."""
    return sum(math.prod(int(s) for s in shape) for shape in shapes.values())
