"""The Gaussian mechanism (Dwork & Roth 2014, Thm. A.1; accounted exactly by its PLD)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..pld import PLD, check_dense_width, neighboring_relation
from .base import PrivacyEvent, check_positive, check_relation

if TYPE_CHECKING:
    import dp_accounting


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent, kind="gaussian"):
    """The Gaussian mechanism ``f(x) + N(0, σ² C² I)`` for an ``f`` whose per-record
    contribution is bounded by ``C`` in L2 norm; ``noise_multiplier = σ``.  Under
    ``replace_one`` neighbouring outputs differ by up to ``Δ = 2C`` (dp-accounting doubles the
    sensitivity internally); under ``add_or_remove_one`` by ``Δ = C``.

    Its privacy loss is Gaussian, ``N(μ²/2, μ²)`` with ``μ = Δ/(σC)`` (``μ``-GDP: Dong, Roth &
    Su, JRSS-B 2022), so its PLD is dp-accounting's ``from_gaussian_mechanism``; on a
    Poisson subsample it is that of the subsampled mixture (its dominating pair: Zhu,
    Dong & Wang, AISTATS 2022).  Its RDP cross-check is dp-accounting's ``GaussianDpEvent`` with the noise
    multiplier halved under ``replace_one`` (Mironov, CSF 2017).
    """

    noise_multiplier: float

    def __post_init__(self) -> None:
        check_positive("noise_multiplier", self.noise_multiplier)

    def loss_width(self, relation: str) -> float:
        """The span of the privacy loss dp-accounting discretises: ``r² + 24 r`` with
        ``r = Δ/(σC)`` (``2/σ`` under replace_one, ``1/σ`` under add_or_remove_one), the
        Gaussian's tails being cut at mass ``e^{-50}``, about 10 standard deviations."""
        r = (2.0 if relation == "replace_one" else 1.0) / self.noise_multiplier
        return r * r + 24 * r

    def pld(self, relation: str, interval: float) -> PLD:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        check_dense_width(self, self.loss_width(relation), interval)
        return pld_lib.from_gaussian_mechanism(self.noise_multiplier, value_discretization_interval=interval,
                                               neighboring_relation=neighboring_relation(relation))

    def sampled_pld(self, sampled: PrivacyEvent, q: float, relation: str, interval: float) -> PLD:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        check_dense_width(sampled, self.loss_width(relation), interval)
        return pld_lib.from_gaussian_mechanism(self.noise_multiplier, value_discretization_interval=interval,
                                               sampling_prob=q, neighboring_relation=neighboring_relation(relation))

    def rdp_curve(self, relation: str, orders: np.ndarray) -> np.ndarray:
        """``α Δ²/(2σ²)`` with ``Δ = 2`` (replace one) or ``1`` (add or remove one), in units of ``C``: the
        Gaussian mechanism's exact RDP (Mironov, CSF 2017, Prop. 7), for composition with RDP-published events."""
        check_relation(relation)
        k = 2.0 if relation == "replace_one" else 1.0
        return np.asarray(orders, dtype=float) * k * k / (2 * self.noise_multiplier**2)

    def rdp(self, relation: str) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.GaussianDpEvent(self.noise_multiplier / (2 if relation == "replace_one" else 1))
