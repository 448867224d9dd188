"""What a run hands its tracker: only values its ``metrics.json`` publishes.

A round's metrics are taken from the round's record as ``metrics.json`` holds it (a secure run's record has
no value computed on the pooled private data; a deployment's has no ``train_loss``), and of it only the
model metric, the losses, ε and the bits a client sends (:data:`ROUND_METRICS`); the encoders' raw
statistics (``encode_stats``) are never logged.  A value the run publishes labelled as a non-private
diagnostic (``train_loss``, ``distance_to_optimum`` in a reproducible run) keeps the label in its name:
``non_private/<name>``.  The parameters are the run's config as ``metrics.json`` records it, flattened.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from typing import Any

ROUND_METRICS = ("test_accuracy", "test_metric", "test_loss", "distance_to_optimum", "train_loss", "epsilon_spent",
                 "epsilon_central", "bits_per_client")
"""A round's logged values, where its record has them."""

FINAL_METRICS = ("test_accuracy", "test_metric", "test_loss", "distance_to_optimum", "train_loss", "bits_per_client",
                 "epsilon_total", "epsilon_amplified", "epsilon_central", "wall_s")
"""The final values logged (``epsilon_amplified``, ``epsilon_central``: their ``epsilon``)."""

NON_PRIVATE_PREFIX = "non_private/"


def _number(value: Any) -> float | None:
    """A published number as a float (an ``{"epsilon": ...}`` record's ε); ``None`` for anything else, and for a
    NaN (a diverged value: not a measurement)."""
    if isinstance(value, dict):
        value = value.get("epsilon")
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def _selected(record: Mapping[str, Any], names: tuple[str, ...], non_private: Collection[str]) -> dict[str, float]:
    """``record``'s numbers among ``names``, those in ``non_private`` renamed ``non_private/<name>``."""
    out = {}
    for name in names:
        value = _number(record.get(name))
        if value is not None:
            out[NON_PRIVATE_PREFIX + name if name in non_private else name] = value
    return out


def round_metrics(rec: Mapping[str, Any], non_private: Collection[str]) -> dict[str, float]:
    """The logged metrics of one round's published record ``rec`` (``non_private``: the names that are
    non-private diagnostics where present)."""
    return _selected(rec, ROUND_METRICS, non_private)


def final_metrics(final: Mapping[str, Any], non_private: Collection[str]) -> dict[str, float]:
    """The logged metrics of a run's published ``final`` record."""
    return _selected(final, FINAL_METRICS, non_private)


def run_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``config`` flattened (``a.b`` for a nested mapping), scalars as they are, ``None`` as ``"None"`` and any
    other value as JSON text."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(run_params(value, name + "."))
        elif value is None or isinstance(value, bool | int | float | str):
            out[name] = "None" if value is None else value
        else:
            out[name] = json.dumps(value, default=str, sort_keys=True)
    return out
