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
* :data:`SECURE`: the reply is the client's **share** of a secure sum (``--trust secagg``): its clipped sums,
  rotated, scaled, rounded (conditioned on the rounding error) and carrying its own share of discrete Gaussian
  noise, reduced mod ``2^bits`` (:mod:`sstq_fl.secagg.records`).  The server learns only the modular sum of the
  shares, so no opt-in is needed.  The event (a
  :class:`~sstq_fl.privacy.events.DistributedDiscreteGaussianEvent`) is computed **on the client** from the
  codec, shift and share count the request names (:data:`SECAGG`), the parameters the client applied.

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

LDP, AGGREGATOR, SECURE = "ldp", "trusted-aggregator", "secure-aggregation"
KINDS = (LDP, AGGREGATOR, SECURE)
CENTRAL_EVENT = "central-event"
"""The task-config key in which the server names the central event an aggregator release feeds (JSON)."""
SECAGG, SECAGG_TASK, SECAGG_SHAPES, SECAGG_ROUND_SEED = "secagg", "secagg-task", "secagg-shapes", "secagg-round-seed"
"""The task-config keys of a secure-aggregation share: the release (:class:`~sstq_fl.secagg.records.RecordSecAgg`,
JSON), the additive task whose sums the share carries, their names and shapes (JSON) and the public rotation seed."""
SHARE_TASK = "secagg.share"
"""The client task that answers with a share (:func:`sstq_fl.gen.client_tasks.secagg_share`)."""

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


def secure_event(config: Mapping[str, Any], out: Mapping[str, np.ndarray]) -> PrivacyEvent:
    """The event of a share: :meth:`~sstq_fl.secagg.records.RecordSecAgg.event` of the release the request names,
    i.e. of the codec, shift and share count the client applied (``ValueError`` for a malformed one)."""
    from ..secagg.records import RecordSecAgg

    text = config.get(SECAGG)
    if not isinstance(text, str):
        raise ValueError("the request does not name its secure-aggregation release (config 'secagg')")
    try:
        return RecordSecAgg.from_json(json.loads(text)).event()
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the request's secure-aggregation release cannot be read: {exc}") from None


SECURE_RELEASE = ReleaseDeclaration(SECURE, secure_event)
"""The declaration of a share of a secure sum."""


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
