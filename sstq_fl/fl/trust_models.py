"""A run's trust model as its stage (``RunConfig.trust``: :data:`~sstq_fl.fl.trust.TRUSTS`)."""

from __future__ import annotations

from typing import Any

from .secure_aggregation import SecureAggregation
from .trust import Curator, Shuffler, TrustedStage


def trusted_stage(cfg: Any, epsilon0: float | None, run_id: str, dim: int = 0) -> TrustedStage | None:
    """The stage of ``cfg.trust`` (``None`` for ``server``; ``dim``: the model's, for ``secagg``)."""
    if cfg.trust == "secagg":
        return SecureAggregation(cfg, dim, run_id)
    if cfg.trust == "shuffler":
        return Shuffler(epsilon0, cfg.seed, cfg.randomness, run_id)
    if cfg.trust == "curator":
        return Curator(cfg.central_epsilon, cfg.rounds, cfg.delta, cfg.clip, cfg.seed, cfg.randomness, run_id)
    return None
