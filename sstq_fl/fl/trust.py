"""Whom the clients trust (``RunConfig.trust``): the server, a shuffler, a curator, or no one (secure aggregation).

* ``server`` (the default): the decoder sees each message with its sender; the run's ε is the local
  one, against the server.
* ``shuffler``: a shuffle stage between the clients and the decoder permutes the round's wire
  messages (with the OS CSPRNG in secure mode; from the run seed in reproducible mode, for simulation
  research) and passes on the bytes alone, so a rejected message is named by its position in the
  shuffled batch, not by a client.  Its ledger charges each round one
  :class:`~sstq_fl.privacy.events.ShuffledLdpEvent` over the messages it shuffled: the central
  guarantee against an analyst who sees only the shuffler's output, for a client that took part in
  every round, capped by the local ε (the shuffled messages are a post-processing of the identified
  ones).  A deployment runs the shuffler as a trusted component this package does not ship (a
  mix-net, a trusted execution environment); the local ε stays the guarantee against whoever runs it.
* ``curator``: the central-DP reference.  Clients send their clipped updates unencoded (encoder
  ``clean``) to a trusted curator, who adds ``N(0, σ² C'² I)`` to their sum (``C' = C (1 + 10⁻⁵)``, the
  largest norm the wire accepts of a clean message clipped at ``C``: the Gaussian mechanism with
  replace-one sensitivity ``2C'``), ``σ`` calibrated so that the run's rounds meet ``central_epsilon``
  at ``δ``.  The noise goes on the decoded mean after the server's norm cap, which is a projection and
  so does not raise the sensitivity ``2C'/n`` of the mean of ``n`` messages.
  Its ledger charges one :class:`~sstq_fl.privacy.events.GaussianEvent` a round.  Against the curator
  there is no guarantee.

* ``secagg``: secure aggregation with distributed discrete noise, trusting no one with an update
  (:mod:`sstq_fl.fl.secure_aggregation`).  :func:`sstq_fl.fl.trust_models.trusted_stage` builds a run's stage.

The central ledger of each is written with its assumption to ``transcript_central.jsonl`` and to
``metrics.json`` (``final.epsilon_central``), its running figure to each round's ``epsilon_central``; the
transcript is written at every checkpoint, and a resumed run's central ledger is its replay.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import rng
from ..config.vocab import TRAIN_TRUSTS
from ..encoders.clean import NORM_TOLERANCE
from ..privacy.calibration import calibrate_noise_multiplier
from ..privacy.events import GaussianEvent, PrivacyEvent, ShuffledLdpEvent
from ..privacy.ldp import capped_central_epsilon
from ..privacy.ledger import PrivacyLedger

TRUSTS = TRAIN_TRUSTS
SHUFFLER_THREAT = ("central, shuffler trusted: the analyst sees each round's messages in random order without sender "
                   "identities; composed over every round, for a client that took part in all of them")
CURATOR_THREAT = ("central, curator trusted: the clients' clipped updates reach a curator unencoded, who releases their "
                  "sum plus Gaussian noise; no guarantee against the curator")
TRANSCRIPT = "transcript_central.jsonl"


class TrustedStage(ABC):
    """A trusted party between the clients and the decoder, with the ledger of the guarantee it gives."""

    threat_model = ""
    trusted = ""  # who the central guarantee trusts, in a few words (the run's summary line)
    hides_senders = False  # whether the decoder learns which client sent which message
    aggregates = False  # whether the clients send shares of a secure sum instead of wire messages

    def bits_per_client(self, message_bits: int) -> int:
        """Bits one client sends a round through this stage, given its encoder's message bits."""
        return message_bits

    def __init__(self, seed: int, randomness: str, run_id: str):
        self.seed, self.randomness = seed, randomness
        self.ledger = PrivacyLedger("replace_one", notes={"threat_model": self.threat_model, "run_id": run_id})
        self.rounds = 0
        self.replayed: set[int] = set()  # reproducible resume: later rounds already charged in the transcript
        self.delta = 1e-5  # the δ of the run's figures (set by the engine)

    def shuffle(self, blobs: list[bytes], round: int) -> list[bytes]:
        """What the decoder receives of the round's messages (default: all of them, in the clients' order)."""
        return blobs

    def noisy(self, mean: torch.Tensor | None, n: int, round: int) -> torch.Tensor | None:
        """The decoded mean of ``n`` messages as released (default: unchanged)."""
        return mean

    @abstractmethod
    def event(self, messages: int) -> PrivacyEvent:
        """The privacy event of one round in which ``messages`` messages reached the stage."""

    def charged(self, messages: int) -> bool:
        """Whether a round in which ``messages`` messages reached the stage is charged (released anything)."""
        return messages > 0

    def charge(self, messages: int, round: int) -> None:
        """One round in which ``messages`` messages reached the stage (an uncharged round records nothing)."""
        if self.charged(messages) and round not in self.replayed:
            self.ledger.record(self.event(messages), meta={"round": round})
        self.rounds = round

    def epsilon(self, delta: float) -> float:
        with np.errstate(over="ignore"):
            return self.ledger.epsilon(delta)

    def resume(self, path: Path, ck: dict[str, Any]) -> None:
        """The ledger as the replay of the whole central transcript ``path``, refused (one line) unless it is this
        run's and charges the checkpoint's rounds ``r`` exactly ``event(clients_r)`` each, in order; charges of
        later rounds are kept (reproducible mode: their re-run sends the same messages, charged once)."""
        from ..privacy.errors import TranscriptError
        from ..privacy.transcript import line_hash, parse_transcript, read_limited

        try:
            parsed = parse_transcript(read_limited(path), str(path))
            last = parsed.summary_line - 1
            led, _ = PrivacyLedger.from_chain(path, last, line_hash(parsed.texts[last - 1]))
        except TranscriptError as exc:
            raise ValueError(f"--resume: {exc}") from None
        if (led.relation, led.plan, led.run_id) != (self.ledger.relation, self.ledger.plan, self.ledger.run_id):
            raise ValueError(f"--resume: {path} is not this run's central transcript (another plan or run id)")
        t = ck["round"]
        mine = [(e.meta.get("round"), e.event) for e in led.entries if e.meta.get("round", t + 1) <= t]
        want = [(int(r["round"]), self.event(int(r["clients"]))) for r in ck["rounds"]
                if self.charged(int(r.get("clients") or 0))]
        if mine != want or any(e.count != 1 or not isinstance(e.meta.get("round"), int) for e in led.entries):
            raise ValueError(f"--resume: {path} charges {len(mine)} round(s), not the {len(want)} rounds with "
                             f"participants the checkpoint's {t} rounds imply")
        self.ledger, self.rounds = led, t
        if self.randomness == "reproducible":
            self.replayed = {int(e.meta["round"]) for e in led.entries if e.meta["round"] > t}

    def figures(self, rounds: int, delta: float) -> list[float]:
        """Each round ``1..rounds``'s central ε, from the replayed ledger."""
        from .resume import epsilon_by_round

        with np.errstate(over="ignore"):
            return epsilon_by_round(self.ledger, rounds, delta, lambda led, r: self.epsilon_of(led, r, delta))

    def epsilon_of(self, ledger: PrivacyLedger, rounds: int, delta: float | None = None) -> float:
        """The central ε of ``ledger`` after ``rounds`` rounds (default: its own composition)."""
        return ledger.epsilon(self.delta if delta is None else delta)

    def report(self, out: Path, delta: float, complete: bool) -> dict[str, Any]:
        """Write the transcript (marked complete with the run); the ``epsilon_central`` entry of ``metrics.json``
        (``binding``: the transcript's own figure, which ``epsilon`` may undercut by the shuffler's cap)."""
        from ..privacy.replay import transcript_binding

        if complete and not self.ledger.complete:
            self.ledger.mark_complete()
        self.ledger.write_transcript(out / TRANSCRIPT, delta=delta)
        return {"epsilon": self.epsilon(delta), "delta": delta, "threat_model": self.threat_model,
                "transcript": TRANSCRIPT, "binding": transcript_binding(out / TRANSCRIPT)}


class Shuffler(TrustedStage):
    """The shuffle stage for a run of ``epsilon0``-LDP messages."""

    threat_model = SHUFFLER_THREAT
    trusted = "the shuffler trusted"
    hides_senders = True

    def __init__(self, epsilon0: float | None, seed: int, randomness: str, run_id: str):
        if epsilon0 is None:
            raise ValueError("trust=shuffler needs an encoder whose message is one pure epsilon-LDP release")
        super().__init__(seed, randomness, run_id)
        self.epsilon0 = epsilon0

    def permutation(self, n: int, round: int) -> np.ndarray:
        """The order in which round ``round``'s ``n`` messages reach the decoder."""
        if self.randomness == "secure":
            perm = list(range(n))
            secrets.SystemRandom().shuffle(perm)
            return np.asarray(perm, dtype=np.int64)
        return np.random.default_rng([self.seed, round, 0x5348]).permutation(n)

    def shuffle(self, blobs: list[bytes], round: int) -> list[bytes]:
        return [blobs[i] for i in self.permutation(len(blobs), round)]

    def event(self, messages: int) -> PrivacyEvent:
        return ShuffledLdpEvent(self.epsilon0, messages)

    def epsilon(self, delta: float) -> float:
        """The central ε at ``δ``, capped by the local ε of a client in every round so far."""
        return capped_central_epsilon(self.ledger, self.epsilon0, self.rounds, delta)

    def epsilon_of(self, ledger: PrivacyLedger, rounds: int, delta: float | None = None) -> float:
        return capped_central_epsilon(ledger, self.epsilon0, rounds, self.delta if delta is None else delta)


class Curator(TrustedStage):
    """The trusted curator of the central-DP reference: Gaussian noise on the sum of clipped updates."""

    threat_model = CURATOR_THREAT
    trusted = "the curator trusted"

    def __init__(self, target_epsilon: float, rounds: int, delta: float, clip: float, seed: int, randomness: str,
                 run_id: str):
        super().__init__(seed, randomness, run_id)
        self.clip = clip
        self.sigma = calibrate_noise_multiplier(target_epsilon, delta, lambda s: [(GaussianEvent(s), rounds)])
        self.ledger.start([(GaussianEvent(self.sigma), rounds)])

    def event(self, messages: int) -> PrivacyEvent:
        return GaussianEvent(self.sigma)

    def noisy(self, mean: torch.Tensor | None, n: int, round: int) -> torch.Tensor | None:
        """``(Σ clip(g_i) + N(0, σ² C'² I)) / n``: the noise on the sum, divided like it (secure: OS CSPRNG)."""
        if mean is None or not n:
            return mean
        std = self.sigma * self.clip * (1 + NORM_TOLERANCE) / n
        d = mean.numel()
        if self.randomness == "secure":
            noise = rng.secure_normal(d, std)
        else:
            noise = std * rng.normal(np.array([self.seed], dtype=np.uint64), f"curator-{round}", d)[0]
        return mean + torch.from_numpy(noise).to(mean.dtype).reshape(mean.shape)
