"""One privacy accounting layer: events, the ledger, transcripts, LDP reports, calibration, DP-SGD.

Every private interaction is declared as an event (:mod:`.events`, one module per mechanism,
each saying how it is accounted) in one :class:`PrivacyLedger` per run (:mod:`.ledger`); ``ε``
is always the ledger's (PLD composition via dp-accounting, :mod:`.pld`; exact pure composition,
:mod:`.pure_composition`; an RDP cross-check, :mod:`.rdp`), recomputable from the run's
transcript (:mod:`.transcript`) with ``sstq-fl privacy replay`` (:mod:`.replay`).  Refusals are
the errors of :mod:`.errors`.
"""

from .calibration import calibrate_ldp_epsilon, calibrate_noise_multiplier
from .errors import (
    AccountingLimitError,
    Budget,
    BudgetExceededError,
    PlanExceededError,
    TranscriptError,
    UnsupportedEventError,
)
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
from .replay import check_binding, replay, transcript_binding

__all__ = [
    "AccountingLimitError", "Budget", "BudgetExceededError", "ComposedEvent", "ExponentialMechanismEvent",
    "GaussianEvent", "LaplaceEvent", "NonPrivateEvent", "PlanExceededError", "PoissonSampledEvent", "PrivacyEvent",
    "PrivacyLedger", "PublicDataEvent", "PureDpEvent", "RandomizedResponseEvent", "SelfComposedEvent",
    "TranscriptError", "UnsupportedEventError", "calibrate_ldp_epsilon", "calibrate_noise_multiplier",
    "check_binding", "ldp_plan_report", "replay", "transcript_binding",
]
