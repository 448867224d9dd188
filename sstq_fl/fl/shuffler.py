"""The trusted shuffler of ``trust=shuffler``: the round's messages reach the decoder in random order,
without the identities of their senders, and the run reports a second, central ε.

With ``trust=server`` (the default) the decoder sees each message with its sender and the run's ε is
the local one, against the server.  With ``trust=shuffler`` the simulation puts a shuffle stage
between the clients and the decoder: it permutes the round's wire messages (with the OS CSPRNG in
secure mode; from the run seed in reproducible mode, for simulation research) and passes on the
bytes alone, so a rejected message is named by its position in the shuffled batch, not by a client.
The shuffler's own ledger charges each round one
:class:`~sstq_fl.privacy.events.ShuffledLdpEvent` over the messages it shuffled.  That is the
central guarantee against an analyst who sees only the shuffler's output, for a client that took
part in every round.  It is capped by the local ε (the shuffled messages are a post-processing of
the identified ones) and written with its assumption to ``transcript_shuffled.jsonl`` and
``metrics.json``.  A deployment runs the shuffler as a trusted component this package does not
ship (e.g. a mix-net or a trusted execution environment); the local ε stays the guarantee against
whoever runs it.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import numpy as np

from ..privacy.events import ShuffledLdpEvent
from ..privacy.ledger import PrivacyLedger
from ..privacy.pure_composition import pure_composition_epsilon

TRUSTS = ("server", "shuffler")
THREAT_MODEL = ("central, shuffler trusted: the analyst sees each round's messages in random order without sender "
                "identities; composed over every round, for a client that took part in all of them")
TRANSCRIPT = "transcript_shuffled.jsonl"


class Shuffler:
    """The shuffle stage and its ledger for one run of ``epsilon0``-LDP messages."""

    def __init__(self, epsilon0: float | None, seed: int, randomness: str, run_id: str):
        if epsilon0 is None:
            raise ValueError("trust=shuffler needs an encoder whose message is one pure epsilon-LDP release")
        self.epsilon0, self.seed, self.randomness = epsilon0, seed, randomness
        self.ledger = PrivacyLedger("replace_one", notes={"threat_model": THREAT_MODEL, "run_id": run_id})
        self.rounds = 0

    def permutation(self, n: int, round: int) -> np.ndarray:
        """The order in which round ``round``'s ``n`` messages reach the decoder."""
        if self.randomness == "secure":
            perm = list(range(n))
            secrets.SystemRandom().shuffle(perm)
            return np.asarray(perm, dtype=np.int64)
        return np.random.default_rng([self.seed, round, 0x5348]).permutation(n)

    def shuffle(self, blobs: list[bytes], round: int) -> list[bytes]:
        """The round's messages in shuffled order (the bytes only)."""
        return [blobs[i] for i in self.permutation(len(blobs), round)]

    def charge(self, messages: int, round: int) -> None:
        """One round of ``messages`` shuffled messages (none charges nothing)."""
        if messages:
            self.ledger.record(ShuffledLdpEvent(self.epsilon0, messages), meta={"round": round})
        self.rounds = round

    def epsilon(self, delta: float) -> float:
        """The central ε at ``δ``, capped by the local ε of a client in every round so far."""
        local = pure_composition_epsilon(self.epsilon0, self.rounds, delta) if self.rounds else 0.0
        with np.errstate(over="ignore"):
            return min(self.ledger.epsilon(delta), local)

    def rebuild(self, rounds: list[dict[str, Any]]) -> None:
        """The ledger as it stood after ``rounds`` (a resumed run: each round's record names its messages)."""
        for rec in rounds:
            self.charge(int(rec.get("messages_shuffled", 0)), int(rec["round"]))

    def report(self, out: Path, delta: float, complete: bool) -> dict[str, Any]:
        """Write the transcript (marked complete with the run); the ``epsilon_central`` entry of ``metrics.json``
        (``epsilon``: capped by the local ε; ``binding``: the transcript's own, uncapped, figure)."""
        from ..privacy.replay import transcript_binding

        if complete and not self.ledger.complete:
            self.ledger.mark_complete()
        self.ledger.write_transcript(out / TRANSCRIPT, delta=delta)
        return {"epsilon": self.epsilon(delta), "delta": delta, "threat_model": THREAT_MODEL,
                "transcript": TRANSCRIPT, "binding": transcript_binding(out / TRANSCRIPT)}
