"""Privacy events, one module per mechanism; each event says how it is accounted.

A new event is one module here defining a frozen dataclass ``class E(PrivacyEvent,
kind="name")`` with its accounting methods (see :class:`~.base.PrivacyEvent`), and its tests:
every module of this package is a built-in module of :data:`~.base.EVENTS`, so a transcript
naming the new kind replays with nothing else changed.
"""

from .approx import ApproxDpEvent
from .base import EVENTS, MAX_COMPOSED_EVENTS, MAX_EVENT_DEPTH, RELATIONS, PrivacyEvent
from .composed import ComposedEvent, SelfComposedEvent
from .distributed import DistributedDiscreteGaussianEvent, SkellamSumEvent
from .gaussian import GaussianEvent
from .laplace import LaplaceEvent
from .non_private import NonPrivateEvent
from .public import PublicDataEvent
from .pure import ExponentialMechanismEvent, PureDpEvent
from .randomized_response import RandomizedResponseEvent, flat_rr_probabilities
from .sampled import PoissonSampledEvent
from .shuffled import ShuffledLdpEvent

__all__ = [
    "EVENTS", "MAX_COMPOSED_EVENTS", "MAX_EVENT_DEPTH", "RELATIONS", "ApproxDpEvent", "ComposedEvent",
    "DistributedDiscreteGaussianEvent", "ExponentialMechanismEvent", "GaussianEvent", "LaplaceEvent",
    "NonPrivateEvent", "PoissonSampledEvent", "PrivacyEvent", "PublicDataEvent", "PureDpEvent",
    "RandomizedResponseEvent", "SelfComposedEvent", "ShuffledLdpEvent", "SkellamSumEvent", "flat_rr_probabilities",
]
