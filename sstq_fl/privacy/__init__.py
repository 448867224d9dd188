"""One privacy accounting layer: events, the ledger, LDP reports, calibration, DP-SGD.

Every private interaction is declared as an event in one :class:`PrivacyLedger` per run;
``ε`` is always the ledger's (PLD composition via dp-accounting), recomputable from the
run's transcript with ``sstq-fl privacy replay``.
"""

from .calibrate import calibrate_ldp_epsilon, calibrate_noise_multiplier
from .errors import Budget, BudgetExceededError, PlanExceededError, UnsupportedEventError
from .events import (
    ComposedEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PublicDataEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
)
from .ldp import ldp_plan_report
from .ledger import PrivacyLedger

__all__ = [
    "Budget", "BudgetExceededError", "ComposedEvent", "ExponentialMechanismEvent", "GaussianEvent", "LaplaceEvent",
    "NonPrivateEvent", "PlanExceededError", "PoissonSampledEvent", "PrivacyEvent", "PrivacyLedger", "PublicDataEvent",
    "PureDpEvent", "RandomizedResponseEvent", "SelfComposedEvent", "UnsupportedEventError", "calibrate_ldp_epsilon",
    "calibrate_noise_multiplier", "ldp_plan_report",
]
