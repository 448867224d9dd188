"""``k``-ary randomized response (Warner, JASA 1965; in dp-accounting's parametrisation)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UnsupportedEventError
from ..floats import EXP_SAFE
from ..pld import PLD, neighboring_relation
from .base import PrivacyEvent

MAX_BUCKETS = 2**53  # randomized response: more buckets than a float64 counts exactly are refused


@dataclass(frozen=True)
class RandomizedResponseEvent(PrivacyEvent, kind="randomized_response"):
    """``k``-ary randomized response in dp-accounting's parametrisation: with probability
    ``1 − noise_parameter`` report the true bucket, otherwise a uniformly random bucket
    (possibly the true one).  Flat ``M``-ary RR with keep probability ``e^ε/(e^ε+M−1)`` is
    ``noise_parameter = M/(e^ε+M−1)``.  Defined under ``replace_one`` only: its privacy loss
    is ``±log(1 + M(1−p)/p)`` between two true buckets, with ``p = noise_parameter``
    (dp-accounting's ``from_randomized_response``); it has no Poisson-subsampled or RDP form here.
    """

    noise_parameter: float
    num_buckets: int

    def __post_init__(self) -> None:
        if isinstance(self.noise_parameter, bool) or not 0 < self.noise_parameter <= 1:
            raise ValueError(f"noise_parameter must be in (0, 1], got {self.noise_parameter!r}")
        if not (isinstance(self.num_buckets, int) and not isinstance(self.num_buckets, bool)
                and 2 <= self.num_buckets <= MAX_BUCKETS):
            raise ValueError(f"num_buckets must be an integer in [2, 2**53], got {self.num_buckets!r}")

    @staticmethod
    def flat(epsilon: float, buckets: int) -> RandomizedResponseEvent:
        """Flat ``M``-ary RR at ``ε``: ``noise_parameter = M/(e^ε+M−1)`` (``= M e^{−ε}/(1+(M−1)e^{−ε})``
        above :data:`~sstq_fl.privacy.floats.EXP_SAFE`; refused once it underflows to 0, i.e. for ε
        beyond about 745)."""
        if epsilon <= EXP_SAFE:
            return RandomizedResponseEvent(buckets / (math.exp(epsilon) + buckets - 1), buckets)
        t = math.exp(-epsilon)
        noise = buckets * t / (1 + (buckets - 1) * t)
        if not noise > 0:
            raise ValueError(f"flat randomized response at epsilon={epsilon:g} flips with a probability below the "
                             f"smallest float64 (supported: epsilon up to about 745)")
        return RandomizedResponseEvent(noise, buckets)

    def pld(self, relation: str, interval: float) -> PLD:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        if relation != "replace_one":
            raise UnsupportedEventError("randomized_response is accounted only under replace_one")
        return pld_lib.from_randomized_response(self.noise_parameter, self.num_buckets,
                                                value_discretization_interval=interval,
                                                neighboring_relation=neighboring_relation(relation))


def flat_rr_probabilities(epsilon: float, m: int) -> tuple[float, float]:
    """Keep and per-other-label probabilities ``(p, q)`` of flat ``m``-ary randomized response.

    ``p = e^ε/(e^ε+m−1)``, ``q = 1/(e^ε+m−1)`` (so ``p/q = e^ε``).  Above
    :data:`~sstq_fl.privacy.floats.EXP_SAFE`, where ``e^ε`` overflows, the same values are computed
    as ``1/(1+(m−1)e^{−ε})`` and ``e^{−ε}/(1+(m−1)e^{−ε})``; below it the formula is the original
    one, bit for bit.
    """
    if epsilon <= EXP_SAFE:
        e = math.exp(epsilon)
        return e / (e + m - 1), 1.0 / (e + m - 1)
    t = math.exp(-epsilon)
    return 1.0 / (1.0 + (m - 1) * t), t / (1.0 + (m - 1) * t)
