"""What a generative client task's reply releases, as the client itself declares it.

Every client task (:func:`sstq_fl.gen.runner.register_client_task`) registers a
:class:`ReleaseDeclaration` beside its function, so a client knows the mechanism of what it is about
to send before anything leaves it, as an encoder knows its own privacy event:

* :data:`LDP`: the reply is already private on the client (randomized response on labels, an
  exponential-mechanism token per location).  The event is computed **on the client** from the
  parameters the task applied (never taken from the server's word), charged to the client's own
  ledger before the reply leaves, and refused past the client's budget.
* :data:`AGGREGATOR`: the reply is a statistic for a **trusted aggregator** (clipped sums the server
  noises once, DP-SGD's clipped gradient sums).  Nothing protects it against the server, so a client
  sends it only where its node operator has opted in (node config ``trust-aggregator = true``; the run
  config cannot turn it on).  It is recorded on the client ledger as the central event the server
  declares it feeds (:data:`CENTRAL_EVENT`: ``GaussianEvent(σ)``, ``PoissonSampledEvent(q,
  GaussianEvent(σ))``, or ``NonPrivateEvent`` for the ε = ∞ reference), under the same budget.

Client-level LDP implies record-level DP at the same ε, so the client's ledger composes both kinds
into one record-level bound for that client's records (Dwork & Roth, "The Algorithmic Foundations
of Differential Privacy", 2014, Thm. 3.16 for the composition).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..privacy.events import ComposedEvent, PrivacyEvent, RandomizedResponseEvent, SelfComposedEvent

LDP, AGGREGATOR = "ldp", "trusted-aggregator"
KINDS = (LDP, AGGREGATOR)
CENTRAL_EVENT = "central-event"
"""The task-config key in which the server names the central event an aggregator release feeds (JSON)."""

EventOf = Callable[[Mapping[str, Any], Mapping[str, np.ndarray]], PrivacyEvent]


@dataclass(frozen=True)
class ReleaseDeclaration:
    """A client task's release: its :data:`KINDS` entry and ``event(config, out)``, the privacy event of the
    reply ``out`` the task computed under ``config``."""

    kind: str
    event: EventOf

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a client task's release kind must be one of {KINDS}, got {self.kind!r}")


def central_event(config: Mapping[str, Any], out: Mapping[str, np.ndarray]) -> PrivacyEvent:
    """The central event the server names in the request (:data:`CENTRAL_EVENT`); ``ValueError`` without one."""
    text = config.get(CENTRAL_EVENT)
    if not isinstance(text, str):
        raise ValueError("the request does not name the central event its sums feed (config 'central-event')")
    try:
        return PrivacyEvent.from_json(json.loads(text))
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"the request's central event cannot be read: {exc}") from None


AGGREGATOR_RELEASE = ReleaseDeclaration(AGGREGATOR, central_event)
"""The declaration of every sum for a trusted aggregator."""


def ldp_release(event: EventOf) -> ReleaseDeclaration:
    """An LDP release whose event the client computes with ``event(config, out)``."""
    return ReleaseDeclaration(LDP, event)


def label_rr_event(config: Mapping[str, Any], out: Mapping[str, np.ndarray]) -> PrivacyEvent:
    """Flat ``k``-ary randomized response at the ``epsilon`` the task applied, once per record (records
    compose in parallel: Warner, JASA 1965)."""
    eps, k = float(config["epsilon"]), int(config.get("classes", 10))
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"label randomized response needs a positive finite epsilon, got {eps!r}")
    return RandomizedResponseEvent.flat(eps, k)


def plan_event(plan: list[tuple[PrivacyEvent, int]]) -> PrivacyEvent:
    """A record-level plan ``[(event, count)]`` as one event (each ``count``-fold, composed in order)."""
    parts = tuple(e if n == 1 else SelfComposedEvent(e, n) for e, n in plan)
    return parts[0] if len(parts) == 1 else ComposedEvent(parts)
