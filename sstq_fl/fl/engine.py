"""The vectorized engine: every client of a round through one batched forward/backward and
one batched encode; the server decodes the wire bytes, aggregates, caps and steps.

Two randomness modes (``RunConfig.randomness``, :mod:`sstq_fl.rng`).  ``reproducible``:
minibatches, participation and encoding coins are derived per ``(seed, round, client)``, so a
run repeats from its config and seed, the engines agree and every encoder sees exactly the same
batches, but no guarantee holds against whoever holds the seed (the server sends it to the
clients; ``metrics.json`` records it).  ``secure``: each client draws a fresh key from the OS
CSPRNG for its minibatch and its coins, and the server samples participants from the OS CSPRNG.

Only the mechanism's output leaves a client: encoder diagnostics are off unless
``diagnostics=True`` (reproducible mode only, labelled non-private), and a client whose gradient
is not finite encodes the public null input ``0`` instead, so its message looks like any other
(declining would itself be a data-dependent signal).  ``train_loss`` is computed on the pooled
private training data: a non-private simulation diagnostic, labelled so in a reproducible run's
``metrics.json`` and left out of deployment metrics (``publish_train_loss=False``).

State is checkpointed atomically after every round (and at round 0); ``resume`` continues
from the last completed round with identical results (reproducible mode).  Round ``t`` is charged,
and its transcript written, before any of its messages is encoded.  A resumed run's ledger is the
replay of the whole hash-chained transcript, which must extend the prefix the checkpoint names, that
prefix charging exactly the checkpoint's rounds; charges written after it are kept (a re-sent round
is charged again in secure mode; in reproducible mode its same messages are charged once).  The
checkpoint holds no ε: each round's ``epsilon_spent`` (with a trusted stage ``epsilon_central``,
replayed from its central transcript) is rebuilt from the replayed ledgers.  Each client's messages
so far are recounted from the seed (reproducible mode) or, where participation was never recorded
(secure mode), taken as the busiest client's for every client, an upper bound.
In secure mode nothing data-dependent is published: no per-client
participation, and the pooled-data diagnostics (``train_loss``, ``distance_to_optimum``) only in
``pooled_diagnostics.json`` with ``pooled_diagnostics``, never in ``metrics.json``.  Ctrl-C (SIGINT) is held while a
checkpoint is written and otherwise stops the run at once: :class:`RunInterrupted` names the
last completed (checkpointed) round.  ``wall_s`` counts the rounds only: one untimed warm-up
step first takes the process's one-time set-up (reported as ``setup_s``).
"""

from __future__ import annotations

import io
import logging
import math
import sys
import time
import uuid
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import wire
from ..aggregation import charge_joins, decode_mean
from ..config.train import RunConfig
from ..encoders import make_encoder
from ..io import atomic_write_bytes, atomic_write_json, run_meta
from ..placement import Placement
from ..privacy.errors import Budget
from ..privacy.ldp import ldp_plan_report
from ..privacy.ledger import PrivacyLedger
from ..privacy.replay import transcript_binding
from ..rng import REPRODUCIBLE_WARNING
from ..stages import stage
from ..tracking import NullTracker, Tracker, final_metrics, open_tracker, round_metrics, run_params
from .checkpoint import finished_run, read_checkpoint, read_theta, remove_checkpoints, sigint_held
from .clients import ClientData
from .resume import check_plan, check_prefix, epsilon_by_round, saved_rounds
from .round_draws import participates
from .tasks import EngineTask, LeastSquaresTask, make_task
from .trust import TRANSCRIPT as CENTRAL_TRANSCRIPT
from .trust_models import trusted_stage

log = logging.getLogger("sstq_fl.fl")


@dataclass
class RoundState:
    round: int = 0
    theta: torch.Tensor | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    joins: np.ndarray | None = None
    wall_s: float = 0.0
    pooled: list[dict[str, Any]] = field(default_factory=list)  # secure mode, pooled_diagnostics: per-round values


NON_PRIVATE_DIAGNOSTICS = ("non-private simulation diagnostics, computed on the pooled private data or the clients' "
                           "raw encoder statistics; no privacy guarantee covers them and a deployment does not publish them")


POOLED_KEYS = ("train_loss", "distance_to_optimum")
"""A round's values computed on the pooled private training data: never in a secure run's ``metrics.json``."""
POOLED_FILE = "pooled_diagnostics.json"

METRIC_KEYS = ("test_accuracy", "test_metric", "test_loss", "distance_to_optimum")
"""A round's model metric, by task: accuracy (classifiers), a user task's own metric or its test loss,
the least-squares distance to θ*."""
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "test_accuracy": (0.0, 1.0), "test_metric": (-math.inf, math.inf), "test_loss": (0.0, math.inf),
    "distance_to_optimum": (0.0, math.inf), "train_loss": (0.0, math.inf), "epsilon_spent": (0.0, math.inf),
    "epsilon_central": (0.0, math.inf), "bits_per_client": (0.0, math.inf)}
"""Each per-round value's range (a user task's ``test_metric``: unbounded); figures clip intervals to it."""

_WARNED: set[str] = set()
_WARM: weakref.WeakKeyDictionary[EngineTask, set[str]] = weakref.WeakKeyDictionary()
"""The encoder specs each live task object was already warmed up with in this process (:meth:`Trainer.warm_up`)."""

RUN_FILES = ("metrics.json", "checkpoint.json", "checkpoint_theta.npy", "transcript.jsonl", "curves.png", POOLED_FILE,
             CENTRAL_TRANSCRIPT)


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run; ``round`` rounds are complete and checkpointed in ``out``."""

    def __init__(self, round: int, out: Path):
        super().__init__(f"interrupted after round {round}")
        self.round, self.out = round, out


def existing_outputs(folder: Path, names: tuple[str, ...] = RUN_FILES) -> list[Path]:
    """Those of a run's output files (``names``; for a run, its per-round θ files too) that ``folder`` holds."""
    found = [folder / n for n in names if (folder / n).exists()]
    return found + sorted(folder.glob("checkpoint_theta-*.npy")) if names is RUN_FILES else found


def _warn_once(msg: str) -> None:
    """Log ``msg`` as a warning the first time this process sees it."""
    if msg not in _WARNED:
        _WARNED.add(msg)
        log.warning(msg)


class Trainer:
    """One run: task, encoder, shards and ledger; ``train`` runs (or resumes) it into a folder."""

    def __init__(self, cfg: RunConfig, task: EngineTask | None = None, publish_train_loss: bool = True,
                 keep_checkpoints: bool = False):
        """Build the run (``task``: an already loaded one to share; ``keep_checkpoints``: leave the
        checkpoint files in place once the run completes); raises ``ValueError`` on a bad encoder spec
        or missing data, ``BudgetExceededError`` if the plan exceeds the budget."""
        self.cfg, self.publish_train_loss, self.keep_checkpoints = cfg, publish_train_loss, keep_checkpoints
        self.plot_curves = True  # curves.png at the end (a sweep's cells leave it to the sweep's figures)
        self.setup_s: float | None = None  # the untimed warm-up of ``train`` (None: no warm-up ran)
        self.task = task or make_task(cfg.task, cfg.seed, **cfg.task_kwargs())
        self.enc = make_encoder(cfg.encoder, self.task.dim, cfg.epsilon, radius=cfg.clip, seed=cfg.seed)
        self.client_enc = self.enc if cfg.device == "cpu" else make_encoder(  # the same public frame, on the device
            cfg.encoder, self.task.dim, cfg.epsilon, radius=cfg.clip, seed=cfg.seed, device=cfg.device)
        if self.enc.public_coins:
            raise ValueError(f"{self.enc.name} with coin=public needs public per-client coins, which training does "
                             f"not supply (leave coin at its default)")
        self.clients = ClientData(cfg, self.task)
        self.ledger = PrivacyLedger("replace_one", notes={"threat_model": "identified: the server sees each client's "
                                                          "messages; epsilon is that of the client who joined most rounds",
                                                          "encoder": self.enc.spec, "randomness": cfg.randomness,
                                                          "encoder_config": cfg.encoder, "sampling_rate": cfg.sampling_rate,
                                                          "trust": cfg.trust,
                                                          "run_id": uuid.uuid4().hex[:12],
                                                          **({"randomness_warning": REPRODUCIBLE_WARNING}
                                                             if cfg.randomness == "reproducible" else {})})
        self.ledger.start([(self.enc.privacy_event(), cfg.rounds)],
                          Budget(cfg.budget_epsilon, cfg.delta) if cfg.budget_epsilon else None)
        self.trusted = trusted_stage(cfg, self.enc.privacy_event().pure_epsilon(), str(self.ledger.run_id),
                                     self.task.dim)
        self.out: Path | None = None  # the run's folder, once ``train`` starts: round charges are written there
        self.log_to: str | None = None  # --log-to: the tracker the run's published metrics also go to
        self.tracker: Tracker = NullTracker()

    def participants(self, t: int) -> np.ndarray:
        cfg = self.cfg
        return np.nonzero(participates(cfg.seed, t, cfg.clients, cfg.sampling_rate, cfg.randomness))[0]

    def client_messages(self, theta: torch.Tensor, t: int, ids: np.ndarray) -> tuple[list[bytes], dict[str, float]]:
        """Client side of round ``t`` for clients ``ids`` (batched): minibatch, gradient, clip, encode.

        Returns one wire message per client and, only with ``diagnostics`` (reproducible mode),
        the encoder's data-dependent statistics.  A non-finite gradient is replaced by the public
        null input ``0`` (the message is then the encoding of 0, like any other message).
        """
        return self.clients.messages(self.client_enc, theta, t, ids)

    def run_round(self, st: RoundState) -> dict[str, Any]:
        assert st.theta is not None
        t = st.round + 1
        sent = self.participants(t)
        self.charge_round(st, t, sent)  # charged, and written, before any message leaves
        if self.trusted is not None and self.trusted.aggregates:
            return self.secure_round(st, t, sent)
        blobs, stats = self.client_messages(st.theta, t, sent)
        if self.trusted is not None:  # a shuffler: the decoder gets the bytes in random order, no senders
            blobs = self.trusted.shuffle(blobs, t)
        return self.server_round(st, t, len(sent), sent, blobs, [], stats)

    def server_round(self, st: RoundState, t: int, n_sent: int, ids: np.ndarray, blobs: list[bytes],
                     dropped: list[dict[str, Any]], stats: dict[str, float]) -> dict[str, Any]:
        """Server side of round ``t``: validate and decode the bytes, aggregate, cap, step, evaluate."""
        cfg = self.cfg
        assert st.theta is not None and st.joins is not None
        rec: dict[str, Any] = {"round": t, "clients": int(n_sent), "dropped": list(dropped)}
        if len(ids):
            got = decode_mean(self.enc.for_round(t), blobs, t, cfg.server_cap, st.theta.dtype)
            shuffled = self.trusted is not None and self.trusted.hides_senders
            rec["dropped"] += [{"shuffled_message": int(i), "reason": why} if shuffled else
                               {"client": int(ids[i]), "reason": why} for i, why in got.rejected]
            rec["bits_per_client"] = self.enc.payload_bits()
            rec["bytes_per_client"] = got.bytes_per_message
            if self.cfg.diagnostics:
                rec["encode_stats"] = stats
            mean = got.mean if self.trusted is None else self.trusted.noisy(got.mean, got.accepted, t)
            if mean is not None:
                with stage("aggregate"):
                    st.theta = st.theta - cfg.lr * mean
        else:
            rec["bits_per_client"] = 0
        return self.close_round(st, rec, len(blobs))

    def close_round(self, st: RoundState, rec: dict[str, Any], messages: int) -> dict[str, Any]:
        """Evaluate the round's ``θ`` and add the run's ε (and the stage's central ε) to its record."""
        with stage("evaluate"):
            self.evaluate_into(st, rec)
        with stage("ledger"):
            rec["epsilon_spent"] = self.ledger.epsilon(self.cfg.delta)
        if self.trusted is not None:
            rec["messages_central"] = messages
            rec["epsilon_central"] = self.trusted.epsilon(self.cfg.delta)
        return rec

    def secure_round(self, st: RoundState, t: int, sent: np.ndarray) -> dict[str, Any]:
        """Round ``t`` under secure aggregation: the clients' shares, their modular sum, its decoded mean (capped
        at ``server_cap``), the step; a round with fewer participants than the sum's threshold releases nothing."""
        from ..aggregation import cap_norm
        from .secure_aggregation import SecureAggregation

        sa, cfg = self.trusted, self.cfg
        assert isinstance(sa, SecureAggregation) and st.theta is not None
        rec: dict[str, Any] = {"round": t, "clients": int(len(sent)), "dropped": [], "bits_per_client": 0}
        if not sa.charged(len(sent)):
            rec["dropped"] = [{"client": int(c), "reason": "fewer participants than the secure sum's threshold"}
                              for c in sent]
            return self.close_round(st, rec, 0)
        shares = self.clients.shares(sa, st.theta, t, sent)
        mean = cap_norm(sa.mean(sa.modular_sum(shares), len(sent), t).to(st.theta.dtype), cfg.server_cap)
        with stage("aggregate"):
            st.theta = st.theta - cfg.lr * mean
        rec["bits_per_client"] = sa.share_bits()
        return self.close_round(st, rec, len(sent))

    def charge_round(self, st: RoundState, t: int, ids: np.ndarray) -> None:
        """Charge round ``t``'s messages of clients ``ids`` (the busiest client's new ones; with a trusted stage
        its event over them) and write the transcripts, before the clients encode: a message that leaves is
        always charged, even if the round never completes."""
        assert st.joins is not None
        st.joins[ids] += 1
        with stage("ledger"):
            charge_joins(self.ledger, self.enc, st.joins, t)
            if self.trusted is not None:
                self.trusted.charge(len(ids), t)
            if self.out is not None:
                self.write_transcripts(self.out)

    def write_transcripts(self, out: Path) -> None:
        """The run's transcript and, with a trusted stage, its central one (each rewritten whole, atomically)."""
        self.ledger.write_transcript(out / "transcript.jsonl", delta=self.cfg.delta)
        if self.trusted is not None:
            self.trusted.ledger.write_transcript(out / CENTRAL_TRANSCRIPT, delta=self.cfg.delta)

    def evaluate_into(self, st: RoundState, rec: dict[str, Any]) -> None:
        """Add the evaluation of ``st.theta`` to the round's record ``rec``; in secure mode the values computed
        on the pooled private data (:data:`POOLED_KEYS`) go to ``st.pooled`` instead, kept only with
        ``pooled_diagnostics``."""
        assert st.theta is not None
        ev = self.task.evaluate(st.theta)
        self.stop_if_diverged(st.theta, ev, rec["round"])
        if not self.publish_train_loss:
            ev.pop("train_loss", None)
        if self.cfg.randomness == "secure":
            pooled = {k: ev.pop(k) for k in POOLED_KEYS if k in ev}
            if self.cfg.pooled_diagnostics and pooled:
                st.pooled.append({"round": rec["round"], **pooled})
        rec.update(ev)

    def stop_if_diverged(self, theta: torch.Tensor, ev: dict[str, Any], t: int) -> None:
        """Raise a one-line ``ValueError`` when the public model ``theta`` or a published evaluation value is
        not finite: a run that goes on would charge epsilon for a model that no longer trains.  In secure mode
        the values computed on pooled private data (:data:`POOLED_KEYS`) are not looked at, so the stop
        depends on public values only."""
        public = {k: v for k, v in ev.items() if self.cfg.randomness != "secure" or k not in POOLED_KEYS}
        bad = [f"{k} is {float(v)}" for k, v in public.items() if not math.isfinite(float(v))]
        if not bool(torch.isfinite(theta).all()):
            bad.insert(0, "the model has non-finite parameters")
        if bad:
            raise ValueError(f"round {t}: {bad[0]} (the model diverged; lr {self.cfg.lr:g}); "
                             f"the run stops before round {t + 1} is charged")

    # ---------------------------------------------------------------- persistence
    def save(self, out: Path, st: RoundState) -> None:
        """Checkpoint atomically as a unit: θ goes to a per-round file first, then the transcript, then
        ``checkpoint.json`` (which names θ's file and the transcript's prefix) replaces the old one, then
        older θ files go.  A ``kill -9`` anywhere leaves a ``checkpoint.json`` whose θ file exists and
        belongs to its round, and whose transcript prefix is in the transcript (which only appends)."""
        assert st.theta is not None
        buf = io.BytesIO()
        np.save(buf, st.theta.numpy(), allow_pickle=False)
        name = f"checkpoint_theta-{st.round:06d}.npy"
        atomic_write_bytes(out / name, buf.getvalue())
        self.write_transcripts(out)
        ck = {"config": asdict(self.cfg), "round": st.round, "rounds": saved_rounds(st.rounds), "wall_s": st.wall_s,
              "run_id": self.ledger.run_id, "theta_file": name, "transcript": self.ledger.chain_head()}
        if self.cfg.pooled_diagnostics:
            ck["pooled_diagnostics"] = st.pooled
        atomic_write_json(out / "checkpoint.json", ck)
        for old in out.glob("checkpoint_theta*.npy"):
            if old.name != name:
                old.unlink(missing_ok=True)

    def load(self, out: Path) -> RoundState:
        """The state checkpointed in ``out`` (its config must be this run's): the ledgers are the replay of the
        whole transcripts (the main one extending the prefix the checkpoint names), the round records' ε the
        replayed ledgers' figures (:mod:`sstq_fl.fl.resume`)."""
        ck = read_checkpoint(out, self.cfg)
        theta = torch.from_numpy(read_theta(out, ck["theta_file"], self.task.init_params(self.cfg.seed).numpy()))
        self.ledger = self.resumed_ledger(out / "transcript.jsonl", ck)
        joins = self.rebuilt_joins(ck["round"], sum(e.count for e in self.ledger.entries))
        rounds = saved_rounds(ck["rounds"])
        for rec, eps in zip(rounds, epsilon_by_round(self.ledger, ck["round"], self.cfg.delta), strict=True):
            rec["epsilon_spent"] = eps
        if self.trusted is not None:
            self.trusted = trusted_stage(self.cfg, self.enc.privacy_event().pure_epsilon(), str(self.ledger.run_id),
                                         self.task.dim)
            assert self.trusted is not None
            self.trusted.resume(out / CENTRAL_TRANSCRIPT, ck)
            for rec, eps in zip(rounds, self.trusted.figures(ck["round"], self.cfg.delta), strict=True):
                rec["messages_central"], rec["epsilon_central"] = int(rec.get("clients", 0)), eps
        return RoundState(ck["round"], theta, rounds, joins, float(ck["wall_s"]), list(ck.get("pooled_diagnostics", [])))

    def resumed_ledger(self, path: Path, ck: dict[str, Any]) -> PrivacyLedger:
        """The replay of the whole transcript, refused unless it extends the prefix ``ck`` names, is this run's
        (plan, budget, encoder, run id) and that prefix charges exactly the checkpoint's rounds
        (:func:`~sstq_fl.fl.resume.check_prefix`); the charges written after the prefix are kept, and in secure
        mode refused where the rounds to come could exceed the plan (:func:`~sstq_fl.fl.resume.check_plan`)."""
        from ..privacy.errors import TranscriptError

        head = ck["transcript"]
        try:
            led, named = PrivacyLedger.from_chain(path, head["lines"], head["sha256"])
        except TranscriptError as exc:
            raise ValueError(f"--resume: {exc}") from None
        ours = (led.relation, led.plan, led.budget, led.notes.get("encoder"), led.run_id)
        if ours != (self.ledger.relation, self.ledger.plan, self.ledger.budget, self.enc.spec, ck["run_id"]):
            raise ValueError(f"--resume: {path} is not this run's transcript (another plan, budget, encoder or run id)")
        check_prefix(self.cfg, led.entries[:named], ck, path)
        check_plan(self.cfg, led.entries, ck, path)
        return led

    def rebuilt_joins(self, rounds: int, charged: int) -> np.ndarray:
        """Each client's messages in the first ``rounds`` rounds, for charging the rounds to come: recounted
        from the seed in reproducible mode (as the Flower server charges them: every client it asks, reply or not;
        an upper bound for a sampled client whose node was not connected); in secure mode,
        where participation is never recorded, ``charged`` (the busiest client's) for every client."""
        cfg = self.cfg
        if cfg.randomness == "secure":
            return np.full(cfg.clients, charged, np.int64)
        joins = np.zeros(cfg.clients, np.int64)
        for t in range(1, rounds + 1):
            joins += participates(cfg.seed, t, cfg.clients, cfg.sampling_rate, cfg.randomness)
        return joins

    def initial_state(self, out: Path, resume: bool) -> RoundState:
        """Create ``out``; the checkpointed state with ``resume`` where there is one, else round 0.
        The run starts here, so here (not for a refused one) reproducible mode warns."""
        if self.cfg.randomness == "reproducible":
            _warn_once(REPRODUCIBLE_WARNING)
        out.mkdir(parents=True, exist_ok=True)
        if resume and (out / "checkpoint.json").exists():
            return self.load(out)
        return RoundState(0, self.task.init_params(self.cfg.seed), [], np.zeros(self.cfg.clients, np.int64))

    def complete_round(self, out: Path, st: RoundState, rec: dict[str, Any], seconds: float, progress: bool) -> None:
        """Record a finished round and checkpoint atomically (metrics, model, joins, transcript);
        Ctrl-C is held until the state and its checkpoint agree."""
        with sigint_held():
            st.wall_s += seconds
            st.rounds.append(rec)
            st.round += 1
            self.save(out, st)
        self.log_round(rec)
        for d in rec["dropped"]:
            log.warning("round %d: client %d left out: %s", rec["round"], d["client"], d["reason"])
        from ..progress import report  # a bar where the caller opened one (sstq-fl run, compare), else a log line

        report("rounds", st.round, self.cfg.rounds, label=self.cfg.encoder, loss=rec.get("train_loss"),
               **{k: rec[k] for k in METRIC_KEYS if k in rec}, eps=rec["epsilon_spent"], took=f"{seconds:.1f} s")

    def train(self, out: str | Path, resume: bool = False, progress: bool | None = None) -> dict[str, Any]:
        """Run (or with ``resume`` continue) into ``out``; Ctrl-C raises :class:`RunInterrupted`."""
        out = self.out = Path(out)
        st = self.initial_state(out, resume)
        show = sys.stderr.isatty() if progress is None else progress
        self.start_tracking(out, st)
        try:
            if st.round == 0:
                with sigint_held():
                    self.save(out, st)  # round 0: an interrupted run can always be resumed
            self.setup_s = self.warm_up(st)
            while st.round < self.cfg.rounds:
                t0 = time.perf_counter()
                rec = self.run_round(st)
                self.complete_round(out, st, rec, time.perf_counter() - t0, show)
            return self.finish(out, st)
        except RunInterrupted:
            raise
        except KeyboardInterrupt as exc:
            raise RunInterrupted(st.round, out) from exc
        finally:
            self.end_tracking(None)  # a run that stopped (one that finished closed its tracker in ``finish``)

    # ---------------------------------------------------------------- experiment tracker (--log-to)
    def start_tracking(self, out: Path, st: RoundState) -> None:
        """Open :attr:`log_to`'s tracker (:mod:`sstq_fl.tracking`) for the run in ``out``, named after the folder:
        the config ``metrics.json`` records as its parameters, then the rounds a resumed run already completed."""
        self.tracker = open_tracker(self.log_to)
        self.tracker.start(out.resolve().name, run_params(asdict(self.cfg)))
        for rec in st.rounds:
            self.log_round(rec)

    def log_round(self, rec: dict[str, Any]) -> None:
        """Log a completed round's published values (:func:`~sstq_fl.tracking.round_metrics`)."""
        self.tracker.log_round(int(rec["round"]), round_metrics(rec, POOLED_KEYS))

    def end_tracking(self, final: dict[str, Any] | None) -> None:
        """Close the tracker with the run's published final values (``None``: the run stopped before completing)."""
        tracker, self.tracker = self.tracker, NullTracker()
        tracker.finish(None if final is None else final_metrics(final, POOLED_KEYS))

    def warm_up(self, st: RoundState) -> float:
        """One untimed client step (encode, unpack, aggregate) and evaluation, discarded, so the
        process's one-time set-up (lazy imports, first vmap and kernel calls) is not charged to the
        first timed round; returns its seconds (0 where this process already warmed up the same task
        object and encoder: a sweep's later cells).  Stateless: keyed coins, no ledger event."""
        t0, t = time.perf_counter(), st.round + 1
        assert st.theta is not None
        warmed = _WARM.setdefault(self.task, set())
        key = f"{self.enc.spec}@{self.cfg.device}"
        if t > self.cfg.rounds or key in warmed:  # a sweep's later cells share the task and encoder
            return 0.0
        blobs, _ = self.client_messages(st.theta, t, np.arange(1))
        enc = self.enc.for_round(t)
        got, _ = wire.unpack_lenient(enc, blobs, round=t)
        if got.n:
            enc.aggregate(got)
        self.task.evaluate(st.theta)
        warmed.add(key)
        return time.perf_counter() - t0

    def bits_per_client(self) -> int:
        """Bits one client sends a round: its share of the secure sum under secure aggregation, else its message."""
        bits = self.enc.payload_bits()
        return self.trusted.bits_per_client(bits) if self.trusted is not None else bits

    def finish(self, out: Path, st: RoundState) -> dict[str, Any]:
        """Mark the ledger complete, rewrite the transcript and write ``metrics.json`` bound to it
        (``privacy_transcript``: run id, sha256, ε, δ; ``sstq-fl privacy replay --metrics`` checks it)."""
        if st.round >= self.cfg.rounds:
            self.ledger.mark_complete()
        self.ledger.write_transcript(out / "transcript.jsonl", delta=self.cfg.delta)
        last = st.rounds[-1]
        final: dict[str, Any] = {k: last[k] for k in (*METRIC_KEYS, "train_loss") if k in last}
        final.update({"bits_per_client": self.bits_per_client(), "epsilon_total": self.ledger.epsilon(self.cfg.delta),
                      "delta": self.cfg.delta, "wall_s": st.wall_s,
                      **({"setup_s": self.setup_s} if self.setup_s is not None else {}), "encoder_spec": self.enc.spec,
                      "kashin_level": getattr(getattr(self.enc, "kashin_cfg", None), "level", None),
                      "encoder_unbiasedness": self.enc.unbiasedness()})
        if self.cfg.sampling_rate < 1:
            final["epsilon_amplified"] = self.amplified_epsilon()
        final["epsilon_threat_model"] = self.ledger.notes["threat_model"]
        if self.trusted is not None:
            final["epsilon_central"] = self.trusted.report(out, self.cfg.delta, st.round >= self.cfg.rounds)
        metrics = {"config": asdict(self.cfg), "randomness": self.randomness_note(), "rounds": st.rounds,
                   "final": final, "privacy_transcript": transcript_binding(out / "transcript.jsonl"), "meta": run_meta()}
        if self.diagnostic_fields():
            metrics["non_private_diagnostics"] = {"fields": self.diagnostic_fields(), "note": NON_PRIVATE_DIAGNOSTICS}
        if self.cfg.pooled_diagnostics:
            atomic_write_json(out / POOLED_FILE, {"run_id": self.ledger.run_id, "note": NON_PRIVATE_DIAGNOSTICS,
                                                  "rounds": st.pooled})
        atomic_write_json(out / "metrics.json", metrics)
        if self.plot_curves:
            plot_run(metrics, out / "curves.png")
        if st.round >= self.cfg.rounds and not self.keep_checkpoints:
            remove_checkpoints(out)
        self.end_tracking(final if st.round >= self.cfg.rounds else None)
        return metrics


    def amplified_epsilon(self) -> dict[str, Any]:
        """ε amplified by Poisson participation: only where sampling is secret from the observer."""
        if self.cfg.randomness != "secure":
            return {"epsilon": None, "reason": "participation is derived from the recorded seed, so whoever holds it "
                                               "knows who took part: no amplification (use randomness=secure)"}
        rep = ldp_plan_report(self.cfg.epsilon, self.cfg.rounds, self.cfg.delta, self.cfg.sampling_rate)
        return {"epsilon": rep["amplified"]["pld"], "threat_model": rep["amplified"]["threat_model"]}

    def randomness_note(self) -> dict[str, Any]:
        """What the run's randomness mode means for whom the guarantee holds against."""
        if self.cfg.randomness == "secure":
            return {"mode": "secure", "guarantee": "holds against the server and every reader of the published "
                                                   "outputs: client keys come from each client's OS CSPRNG and never "
                                                   "leave it; server sampling is from the OS CSPRNG and not recorded; "
                                                   "nothing computed on the pooled private data is published"}
        return {"mode": "reproducible", "guarantee": REPRODUCIBLE_WARNING}

    def diagnostic_fields(self) -> list[str]:
        """The per-round fields of ``metrics.json`` that no privacy guarantee covers (none in secure mode)."""
        if self.cfg.randomness == "secure":
            return []
        out = ["train_loss"] if self.publish_train_loss else []
        if isinstance(self.task, LeastSquaresTask):  # a plug-in's least squares too, whatever its name
            out.append("distance_to_optimum (θ* is fitted on the pooled private data)")
        return out + (["encode_stats"] if self.cfg.diagnostics else [])


def plot_run(metrics: dict[str, Any], path: Path) -> Any:
    """One run's ``curves.png`` (:func:`sstq_fl.plots.plot_run`; matplotlib is imported only when plotting)."""
    from ..plots import plot_run as plot

    return plot(metrics, path)


def run(cfg: RunConfig, out: str | Path, resume: bool = False, progress: bool | None = None,
        trainer: Trainer | None = None, keep_checkpoints: bool = False, log_to: str | None = None,
        placement: Placement | None = None) -> dict[str, Any]:
    """Run ``cfg`` into ``out`` on its engine (``trainer``: an already built one, vectorized engine;
    ``keep_checkpoints``: leave the checkpoint once the run completes; ``log_to``: also log its published
    metrics to this tracker, :mod:`sstq_fl.tracking`; ``placement``: where the Flower engine's simulation runs,
    :class:`~sstq_fl.placement.Placement`); with ``resume``, a run already complete there returns its metrics."""
    done = finished_run(Path(out), cfg, resume)
    if done is not None:
        return done
    if cfg.engine == "flower":
        from ..backends import backend  # Flower stays at the edges: found by entry point

        kw: dict[str, Any] = {"log_to": log_to} if log_to else {}
        kw.update(placement.backend_kwargs() if placement is not None else {})
        return backend("flower-train")(cfg, Path(out), resume, progress, keep_checkpoints=keep_checkpoints, **kw)
    trainer = trainer or Trainer(cfg)
    trainer.keep_checkpoints = trainer.keep_checkpoints or keep_checkpoints
    trainer.log_to = log_to or trainer.log_to
    return trainer.train(out, resume, progress)


def trainers(base: RunConfig, specs: list[str]) -> dict[str, Trainer]:
    """Build, and so check, every encoder's trainer on one shared task before anything is trained
    or written: a bad spec, missing data or an exceeded budget fails here, naming the spec."""
    from dataclasses import replace

    task = make_task(base.task, base.seed, **base.task_kwargs())
    out: dict[str, Trainer] = {}
    for spec in specs:
        try:
            out[spec] = Trainer(replace(base, encoder=spec), task=task)
        except ValueError as exc:
            raise ValueError(f"encoder {spec!r}: {exc}") from exc
    return out
