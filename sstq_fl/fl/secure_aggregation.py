"""``trust=secagg``: secure aggregation with distributed discrete noise (``RunConfig.trust``).

Each round every participating client clips its update (encoder ``clean``), rotates it with the round's public
randomized Hadamard transform, scales and rounds it to integers, adds its own share of discrete noise (discrete
Gaussian: Kairouz, Liu & Steinke, ICML 2021; or Skellam: Agarwal, Kairouz & Liu, NeurIPS 2021) and reduces it
modulo ``m = 2^bits`` (:class:`~sstq_fl.secagg.codec.SecAggCodec`).  Secure aggregation reveals only the sum of
the shares modulo ``m``; the server centres, unscales and un-rotates it into the noisy sum of the clipped updates.
On the vectorized engine the modular sum is computed directly; on the Flower engine it runs through Flower's
SecAgg+ (:mod:`sstq_fl.flower.apps.secagg_server`), and both decode the same sum bit for bit on the same seeds.

The guarantee is against the server and every reader of its outputs, with no party trusted with an update (up to
the protocol's collusion threshold).  Accounting (one ledger, ``transcript_central.jsonl``): each round is one
:class:`~sstq_fl.privacy.events.DistributedDiscreteGaussianEvent` (or
:class:`~sstq_fl.privacy.events.SkellamSumEvent`) for the *fewest* clients whose shares a completed round sums,
``⌈(1 − dropout) · expected⌉`` (at most ``clients − 1``: a round may always lose one node): fewer shares would
carry less noise, so a round is charged as if only that many survived, and a round with fewer participants releases
nothing and is not charged.  Rounds compose by RDP
(replace-one neighbours); Poisson participation is not amplified (the server runs the protocol and learns who took
part).  The local noise is calibrated so that all ``rounds`` rounds meet ``central_epsilon`` at ``δ``.

Coins: a client's rounding and noise come from its own generator: in secure mode Philox-4x64 keyed with 128 bits of
the client's fresh OS-CSPRNG key (never sent); in reproducible mode from ``(seed, round, client)`` (simulation only:
whoever holds the seed can subtract the noise).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import torch

from .. import rng
from ..privacy.events import PrivacyEvent
from ..secagg.accounting import calibrate, round_event
from .trust import TrustedStage

SECAGG_THREAT = ("central, no one trusted with an update: each client adds its share of discrete noise to its "
                 "quantized update and the server learns only their modular sum (secure aggregation); it holds against "
                 "the server, for rounds with at least the protocol's threshold of surviving clients")


def survivors_needed(expected: float, dropout: float, clients: int) -> int:
    """The fewest clients whose shares a completed round sums: ``⌈(1 − dropout) · expected⌉``, and at most
    ``clients − 1`` (a round may always lose one node and still complete); at least 1."""
    return max(1, min(math.ceil((1.0 - dropout) * expected - 1e-9), clients - 1))


def round_seed(seed: int, round: int) -> int:
    """The public seed of round ``round``'s rotation (published with the round; no privacy rests on it)."""
    return int(rng.derive_seed(seed, round, rng.stream_id("secagg-rotation")))


def client_generators(randomness: str, seed: int, round: int, clients: np.ndarray,
                      keys: np.ndarray | None) -> list[np.random.Generator]:
    """Each client's own generator for its rounding and noise (see the module docstring)."""
    if keys is not None:
        return [np.random.Generator(np.random.Philox(key=int(k[0]) | (int(k[1]) << 64))) for k in keys]
    seeds = rng.derive_seeds(seed, round, np.asarray(clients, dtype=np.int64), rng.stream_id("secagg-coins"))
    return [np.random.Generator(np.random.PCG64(int(s))) for s in seeds]


class SecureAggregation(TrustedStage):
    """The secure sum with distributed noise: its codec, its ledger, and the round's decode."""

    threat_model = SECAGG_THREAT
    trusted = "secure aggregation, no one trusted with an update"
    hides_senders = True
    aggregates = True  # the clients send shares of a secure sum, not wire messages

    def __init__(self, cfg: Any, dim: int, run_id: str):
        super().__init__(cfg.seed, cfg.randomness, run_id)
        expected = cfg.clients * cfg.sampling_rate
        self.min_clients = survivors_needed(expected, cfg.secagg_dropout, cfg.clients)
        self.codec = calibrate(cfg.central_epsilon, cfg.delta, cfg.rounds, self.min_clients, dim, cfg.clip,
                               cfg.secagg_bits, noise=cfg.secagg_noise, relation="replace_one",
                               expected_clients=cfg.clients)
        self.sums: dict[int, str] = {}  # round → SHA-256 of the modular sum it decoded (engines compare these)
        self.round_event = round_event(self.codec, self.min_clients)
        self.ledger.notes.update({"codec": self.codec_notes(), "min_clients": self.min_clients})
        self.ledger.start([(self.round_event, cfg.rounds)])

    def codec_notes(self) -> dict[str, Any]:
        c = self.codec
        return {"noise": c.noise, "bits": c.bits, "scale": c.scale, "local_stddev": c.local_stddev, "clip": c.clip,
                "dim": c.dim, "padded": c.padded, "beta": c.beta}

    def charged(self, messages: int) -> bool:
        return messages >= self.min_clients

    def event(self, messages: int) -> PrivacyEvent:
        return self.round_event

    def shares(self, grads: torch.Tensor, round: int, clients: np.ndarray, keys: np.ndarray | None) -> np.ndarray:
        """The clients' shares ``[n, padded]`` in ``Z_m`` (each client's row from its own generator)."""
        x = grads.detach().to(torch.float64).cpu().numpy()
        gens = client_generators(self.randomness, self.seed, round, clients, keys)
        rs = round_seed(self.seed, round)
        return np.concatenate([self.codec.encode(x[i:i + 1], rs, g) for i, g in enumerate(gens)]) if len(gens) \
            else np.zeros((0, self.codec.padded), np.int64)

    def modular_sum(self, shares: np.ndarray) -> np.ndarray:
        """What secure aggregation reveals of the round: the shares' sum modulo ``m``."""
        return self.codec.modular_sum(shares)

    def bits_per_client(self, message_bits: int) -> int:
        return self.share_bits()

    def share_bits(self) -> int:
        """Bits one client sends into the secure sum: ``padded · bits`` (SecAgg+'s masks and keys not counted)."""
        return self.codec.padded * self.codec.bits

    def mean(self, modsum: np.ndarray, n: int, round: int) -> torch.Tensor:
        """The released mean of ``n`` clients' clipped updates: the decoded noisy sum over ``n``."""
        self.sums[round] = hashlib.sha256(np.ascontiguousarray(modsum, dtype=np.int64).tobytes()).hexdigest()
        total = self.codec.decode_sum(modsum, round_seed(self.seed, round))
        return torch.from_numpy(total / n)
