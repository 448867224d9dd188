"""Privacy amplification by shuffling: the central guarantee of ``n`` shuffled ε₀-LDP messages.

A shuffler receives one message from each of ``n`` clients, each message the output of an
ε₀-LDP local randomizer, and publishes them in a uniformly random order with no sender
identities.  Against an analyst who sees only the shuffled messages (and everything else,
including every other client's input), the round is ``(ε, δ)``-DP in the victim's input
for an ``ε`` much smaller than ``ε₀`` once ``n`` is in the hundreds.

**The dominating pair.**  Wang, Peng, Li, Qiu, Xia & Tan, "Privacy amplification via shuffling:
unified, simplified, and tightened" (PVLDB 17(8), 2024, Thm. 4.2 with Def. 4.1) show that if
the randomizer has the *variation-ratio* property with parameters ``(p, β, q)`` (for the
victim's two inputs ``x⁰, x¹`` and any input ``x``: ``D_{x⁰} ≤ p·D_{x¹}``,
``TV(D_{x⁰}, D_{x¹}) ≤ β``, ``D_{x⁰}, D_{x¹} ≤ q·D_x``), the shuffled output is a
post-processing of the following pair, the same post-processing for both inputs.  Let
``α = β/(p − 1)`` and ``r = αp/q``.  Each of the ``n − 1`` other clients reports ``0`` w.p.
``r``, ``1`` w.p. ``r`` and ``2`` otherwise; the victim reports ``0, 1, 2`` w.p.
``(pα, α, 1 − α − pα)`` under ``x⁰`` and ``(α, pα, 1 − α − pα)`` under ``x¹``; the pair
``(P⁰, P¹)`` is the law of the counts ``(N₀, N₁)`` of 0s and 1s.  With ``T = N₀ + N₁``,
``C ~ Bin(n − 1, 2r)`` and ``B(k; m) = Bin(k; m, ½)``:

``P⁰(t, k) = b(t−1)·[pα·B(k−1; t−1) + α·B(k; t−1)] + b(t)·(1 − α − pα)·B(k; t)``, and
``P¹(t, k) = P⁰(t, t − k)``,

so the pair is symmetric and one privacy-loss distribution describes both directions.  Since
``H_{e^ε}(M(x⁰) ‖ M(x¹)) ≤ H_{e^ε}(P⁰ ‖ P¹)`` for every ``ε`` and the same pair dominates every
round (the randomizers may be chosen adaptively from earlier rounds: FMT21, Sec. 3, does so
for ε₀-DP randomizers), the ``T``-round composition is dominated by the product of the pairs
(Zhu, Dong & Wang, AISTATS 2022, Thm. 10), which the ledger composes as privacy-loss
distributions, as Koskela, Heikkilä & Honkela ("Numerical accounting in the shuffle model of
differential privacy", TMLR 2023) do for the pair of Feldman, McMillan & Talwar.

Parameters used here (``q0 = q1 = q``):

* any ε₀-LDP randomizer: ``p = q = e^{ε₀}``, ``β = (e^{ε₀} − 1)/(e^{ε₀} + 1)``; then ``r =
  1/(e^{ε₀} + 1)``, the "stronger clones" of Feldman, McMillan & Talwar (SODA 2023);
* not claimed: the tightening Wang et al. (Table 2) give for a randomizer's own output law, ``β <
  tanh(ε₀/2)`` with ``p = q = e^{ε₀}``.  For flat ``k``-ary randomized response, ``β = (e^{ε₀} −
  1)/(e^{ε₀} + k − 1)``, exact enumeration of the shuffled histograms refutes it: at ``k = 3``,
  ``ε₀ = 2``, ``n = 5`` the victim's inputs 0 and 2 among others holding ``(0, 0, 0, 1)`` give
  ``δ(1.5) = 0.1221`` where the pair (and the authors' code) give 0.1033, and at ``n = 20`` still
  0.04141 against 0.04136 at ``ε = 1`` (an exact enumeration any reader can repeat).  The pair with ``β =
  tanh(ε₀/2)`` passes the same enumeration;
* Feldman, McMillan & Talwar, "Hiding among the clones" (FOCS 2021, Thm. 3.2): ``C ~ Bin(n − 1,
  e^{−ε₀})``, i.e. ``r = e^{−ε₀}/2``, ``β`` as for any ε₀-LDP randomizer
  (:func:`fmt21_pair`); kept for comparison with their published numbers.

The pair's PLD is built exactly on the support of ``(T, N₀)`` within a window holding all but
:data:`TAIL_MASS` of ``P⁰``; what lies outside the window is charged as infinite loss, and
losses are rounded up onto the grid, so the reported ``δ(ε)`` only over-estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import AccountingLimitError
from .floats import EXP_SAFE
from .pld import PLD

TAIL_MASS = 1e-9  # mass of P⁰ the grid may leave out, charged as infinite loss (beyond 9 sd the tails hold ~1e-18;
#                   the rest is float error of scipy's log-pmfs, ~1e-17 a point)
SUM_SLACK = 1e-14  # added to the left-out mass: the float error of summing P⁰ over the grid
LOSS_SLACK = 1e-8  # added to every loss before rounding up: the float error of the log-pmfs
MAX_SUPPORT = 2**26  # support points of one pair's PLD (about 10 s to build)
CHUNK = 2**21  # support points evaluated at once


@dataclass(frozen=True)
class ShufflePair:
    """The variation-ratio dominating pair of ``messages`` shuffled messages (see the module)."""

    p: float
    beta: float
    q: float
    messages: int

    def __post_init__(self) -> None:
        if not (isinstance(self.messages, int) and not isinstance(self.messages, bool) and self.messages >= 1):
            raise ValueError(f"messages must be a positive integer, got {self.messages!r}")
        if not (1 < self.p < math.inf and 0 < self.beta <= (self.p - 1) / (self.p + 1) * (1 + 1e-12)):
            raise ValueError(f"need p > 1 and 0 < beta <= (p-1)/(p+1); got p={self.p!r}, beta={self.beta!r}")
        if not self.q >= self.beta * self.p / (self.p - 1) * 2:
            raise ValueError(f"need q >= 2 beta p/(p-1) (other clients' 0 and 1 masses sum to at most 1), got q={self.q!r}")

    @property
    def alpha(self) -> float:
        return self.beta / (self.p - 1)

    @property
    def r(self) -> float:
        """Each other client's probability of reporting 0 (and of reporting 1)."""
        return self.alpha * self.p / self.q

    def log_p0(self, t: np.ndarray, k: np.ndarray) -> np.ndarray:
        """``log P⁰(t, k)`` at support points ``0 ≤ k ≤ t ≤ messages``."""
        from scipy import stats  # imported here: it takes a second, and an LDP run without a shuffler never needs it

        a, n = self.alpha, self.messages
        rest = max(0.0, 1.0 - a - self.p * a)
        tm1 = np.maximum(t - 1, 0)  # t = 0 has no victim-0/1 term (masked below)
        with np.errstate(divide="ignore"):
            lb1 = np.where(t >= 1, stats.binom.logpmf(tm1, n - 1, 2 * self.r), -np.inf)
            lb0 = stats.binom.logpmf(t, n - 1, 2 * self.r)
            terms = (lb1 + math.log(self.p * a) + stats.binom.logpmf(k - 1, tm1, 0.5),
                     lb1 + math.log(a) + stats.binom.logpmf(k, tm1, 0.5),
                     lb0 + (math.log(rest) if rest > 0 else -np.inf) + stats.binom.logpmf(k, t, 0.5))
        return np.logaddexp(np.logaddexp(terms[0], terms[1]), terms[2])

    def support(self, z: float) -> tuple[np.ndarray, np.ndarray]:
        """Support points ``(t, k)`` within ``z`` standard deviations of ``C`` and of ``N₀ | T``."""
        n, rate = self.messages, 2 * self.r
        mean, sd = (n - 1) * rate, math.sqrt((n - 1) * rate * (1 - rate))
        t = np.arange(max(0, math.floor(mean - z * sd) - 2), min(n, math.ceil(mean + z * sd) + 3) + 1)
        half = np.sqrt(np.maximum(t, 1)) / 2
        lo = np.maximum(0, np.floor(t / 2 - z * half) - 2).astype(np.int64)
        hi = np.minimum(t, np.ceil(t / 2 + z * half) + 2).astype(np.int64)
        counts = hi - lo + 1
        if counts.sum() > MAX_SUPPORT:
            raise AccountingLimitError(f"the shuffle bound for {n} messages needs {int(counts.sum()):.3g} support "
                                       f"points (limit {MAX_SUPPORT})")
        ts = np.repeat(t, counts)
        ks = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        return ts, ks

    def rounded_pmf(self, interval: float) -> tuple[dict[int, float], float]:
        """``P⁰``'s privacy loss rounded up onto the grid ``interval·ℤ``, and the mass charged as ``+∞``."""
        for z in (9.0, 12.0, 16.0, 24.0):
            ts, ks = self.support(z)
            hist: dict[int, float] = {}
            total = math.fsum(self._chunk(ts[i:i + CHUNK], ks[i:i + CHUNK], interval, hist)
                              for i in range(0, len(ts), CHUNK))
            inf_mass = hist.pop(_INF, 0.0)
            left_out = max(0.0, 1.0 - total)
            if left_out <= TAIL_MASS:
                return hist, inf_mass + left_out + SUM_SLACK
        raise AccountingLimitError(f"the shuffle bound for {self.messages} messages left {left_out:.3g} of the mass "
                                   f"outside its window")

    def _chunk(self, t: np.ndarray, k: np.ndarray, interval: float, hist: dict[int, float]) -> float:
        """Add one chunk's losses to ``hist`` (key :data:`_INF` for infinite loss); return its mass."""
        lp0, lp1 = self.log_p0(t, k), self.log_p0(t, t - k)
        mass = np.exp(lp0)
        live = mass > 0
        loss = lp0[live] - lp1[live]
        finite = np.isfinite(loss)
        idx = np.ceil((loss[finite] + LOSS_SLACK) / interval).astype(np.int64)
        keys, inv = np.unique(idx, return_inverse=True)
        sums = np.bincount(inv, weights=mass[live][finite])
        for key, s in zip(keys.tolist(), sums.tolist()):
            hist[key] = hist.get(key, 0.0) + s
        if (~finite).any():
            hist[_INF] = hist.get(_INF, 0.0) + float(mass[live][~finite].sum())
        return float(mass[live].sum())

    def pld(self, interval: float) -> PLD:
        """The pair's privacy-loss distribution (symmetric), pessimistically discretised."""
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        pmf, inf_mass = self.rounded_pmf(interval)
        return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(pmf, inf_mass, interval)


_INF = 2**62  # histogram key of infinite loss


@lru_cache(maxsize=16)
def pair_pld(pair: ShufflePair, interval: float) -> PLD:
    """:meth:`ShufflePair.pld`, built once per pair and grid (a ledger asks for it to validate, then to compose)."""
    return pair.pld(interval)


def ldp_total_variation(epsilon0: float) -> float:
    """``(e^{ε₀} − 1)/(e^{ε₀} + 1) = tanh(ε₀/2)``: the largest total variation between the output laws
    of an ε₀-LDP randomizer on two inputs (Kairouz, Oh & Viswanath, ICML 2015)."""
    return math.tanh(epsilon0 / 2)


def variation_ratio_pair(epsilon0: float, messages: int, total_variation: float | None = None) -> ShufflePair:
    """The pair for ``messages`` shuffled ε₀-LDP messages whose output laws differ by at most
    ``total_variation`` in total variation (default: any ε₀-LDP randomizer): ``p = q = e^{ε₀}``."""
    _check_epsilon0(epsilon0)
    beta = ldp_total_variation(epsilon0) if total_variation is None else total_variation
    return ShufflePair(math.exp(epsilon0), beta, math.exp(epsilon0), messages)


def fmt21_pair(epsilon0: float, messages: int) -> ShufflePair:
    """Feldman, McMillan & Talwar (FOCS 2021, Thm. 3.2): ``C ~ Bin(n − 1, e^{−ε₀})`` clones, the
    victim's bit ``Bern(e^{ε₀}/(e^{ε₀} + 1))``; in variation-ratio form ``q = 2e^{2ε₀}/(e^{ε₀} + 1)``."""
    _check_epsilon0(epsilon0)
    e = math.exp(epsilon0)
    return ShufflePair(e, ldp_total_variation(epsilon0), 2 * e * e / (e + 1), messages)


def fmt21_closed_form(epsilon0: float, messages: int, delta: float) -> float | None:
    """The closed-form bound of Feldman, McMillan & Talwar (FOCS 2021, Thm. 3.1, as computed by their
    public code): shuffling ``n`` ε₀-LDP messages is ``(ε, δ)``-DP with ``ε = log(1 + (1 − e^{−ε₀})/(1 +
    e^{−ε₀−e'}) (a + c))``, ``a = 8√(e^{ε₀} log(4/δ)/n)``, ``c = 8e^{ε₀}/n``, ``e' = log(1 + a + c)``;
    ``None`` outside its range ``ε₀ ≤ log(n/(16 log(4/δ)))``."""
    n = messages
    if epsilon0 > math.log(n / (16 * math.log(4 / delta))):
        return None
    a = 8 * math.sqrt(math.exp(epsilon0) * math.log(4 / delta) / n)
    c = 8 * math.exp(epsilon0) / n
    e = math.log(1 + a + c)
    return math.log1p((1 - math.exp(-epsilon0)) / (1 + math.exp(-epsilon0 - e)) * (a + c))


def _check_epsilon0(epsilon0: float) -> None:
    if isinstance(epsilon0, bool) or not (isinstance(epsilon0, int | float) and 0 < epsilon0 <= EXP_SAFE):
        raise ValueError(f"local epsilon must be in (0, {EXP_SAFE:g}], got {epsilon0!r}")
