"""One round of ε₀-LDP messages through a trusted shuffler: the central guarantee."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnsupportedEventError
from ..floats import EXP_SAFE, finite_real
from ..pld import PLD, check_dense_width
from ..shuffle import ShufflePair, pair_pld, variation_ratio_pair
from .base import PrivacyEvent


@dataclass(frozen=True)
class ShuffledLdpEvent(PrivacyEvent, kind="shuffled_ldp"):
    """``messages`` messages, one per client, each the output of an ``epsilon0``-LDP randomizer, published by
    a shuffler in uniformly random order without sender identities.

    The guarantee is against an analyst who sees only the shuffled messages, with the shuffler trusted;
    against a party that sees them with their senders it is the ``epsilon0``-LDP guarantee alone (a
    :class:`~.pure.PureDpEvent`).  Neighbouring inputs replace one client's data; the number of messages
    is public.  Its privacy-loss distribution is that of the dominating pair of Feldman, McMillan &
    Talwar's stronger clones (SODA 2023; the variation-ratio pair of Wang et al., PVLDB 2024, Thm. 4.2,
    with ``p = q = e^{ε₀}``, ``β = tanh(ε₀/2)``: :mod:`sstq_fl.privacy.shuffle`), and rounds compose as
    that pair's PLDs (Zhu, Dong & Wang, AISTATS 2022, Thm. 10).  Poisson participation is not combined
    with it (the number of shuffled messages would then be random and the victim's presence a second
    secret); it has no RDP cross-check.
    """

    epsilon0: float
    messages: int

    def __post_init__(self) -> None:
        if not 0 < finite_real(self.epsilon0, "epsilon0") <= EXP_SAFE:
            raise ValueError(f"epsilon0 must be in (0, {EXP_SAFE:g}], got {self.epsilon0!r}")
        if not (isinstance(self.messages, int) and not isinstance(self.messages, bool) and self.messages >= 1):
            raise ValueError(f"messages must be a positive integer, got {self.messages!r}")

    def pair(self) -> ShufflePair:
        return variation_ratio_pair(self.epsilon0, self.messages)

    def pld(self, relation: str, interval: float) -> PLD:
        if relation != "replace_one":
            raise UnsupportedEventError(f"{self.kind} is accounted only under replace_one (one client's data replaced, "
                                        f"the number of shuffled messages public), not {relation}")
        check_dense_width(self, 2 * self.epsilon0, interval)
        return pair_pld(self.pair(), interval)
