"""The vectorized engine: every client of a round through one batched forward/backward and
one batched encode; the server decodes the wire bytes, aggregates, caps and steps.

Randomness is derived per ``(seed, round, client)`` (minibatches, participation, encoding
seeds), so a run is reproducible from its config and seed and every encoder sees exactly
the same batches.  State is checkpointed atomically after every round; ``resume`` continues
from the last completed round with identical results.
"""

from __future__ import annotations

import io
import json
import logging
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import wire
from ..encoders import make_encoder
from ..io import atomic_write_bytes, atomic_write_json, run_meta
from ..privacy.ldp import ldp_plan_report
from ..privacy.ledger import Budget, PrivacyLedger
from .partition import dirichlet_shards, encoder_seeds, iid_shards, minibatches, participates
from .tasks import Task, make_task

log = logging.getLogger("sstq_fl.fl")


@dataclass
class RunConfig:
    """Everything that determines a run (with the seed, it determines every number)."""

    task: str = "fmnist"
    encoder: str = "sstq-flat:b=4"
    clients: int = 100
    rounds: int = 100
    epsilon: float = 3.0
    seed: int = 0
    batch: int = 64
    clip: float = 0.1
    lr: float = 0.2
    server_cap: float = 10.0
    partition: str = "iid"
    alpha: float = 0.5
    sampling_rate: float = 1.0
    delta: float = 1e-5
    budget_epsilon: float | None = None
    engine: str = "vectorized"
    data_dir: str | None = None
    dim: int = 100
    n: int = 4000

    def __post_init__(self) -> None:
        if not math.isfinite(self.epsilon) or self.epsilon <= 0:
            raise ValueError(f"epsilon must be positive and finite, got {self.epsilon}")
        if self.clients < 1 or self.rounds < 1 or self.batch < 1:
            raise ValueError("clients, rounds and batch must be positive")
        if not (self.clip > 0 and self.lr > 0 and self.server_cap > 0):
            raise ValueError("clip, lr and server_cap must be positive")
        if not 0 < self.sampling_rate <= 1:
            raise ValueError(f"sampling rate must be in (0, 1], got {self.sampling_rate}")
        if self.partition not in ("iid", "dirichlet"):
            raise ValueError(f"partition must be iid or dirichlet, got {self.partition!r}")
        if self.engine not in ("vectorized", "flower"):
            raise ValueError(f"engine must be 'vectorized' or 'flower', got {self.engine!r}")


@dataclass
class RoundState:
    round: int = 0
    theta: torch.Tensor | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    joins: np.ndarray | None = None
    wall_s: float = 0.0


class Trainer:
    def __init__(self, cfg: RunConfig, task: Task | None = None):
        self.cfg = cfg
        self.task = task or make_task(cfg.task, cfg.seed, data_dir=cfg.data_dir, dim=cfg.dim, n=cfg.n)
        self.enc = make_encoder(cfg.encoder, self.task.dim, cfg.epsilon, radius=cfg.clip, seed=cfg.seed)
        y = self.task.data.y_train
        n_rec = self.task.data.x_train.shape[0]
        self.shards = (iid_shards(n_rec, cfg.clients, cfg.seed) if cfg.partition == "iid"
                       else dirichlet_shards(y.numpy(), cfg.clients, cfg.alpha, cfg.seed))
        self.ledger = PrivacyLedger("replace_one", notes={"threat_model": "identified: the server sees each client's "
                                                          "messages; epsilon is that of the client who joined most rounds",
                                                          "encoder": self.enc.spec})
        self.ledger.start([(self.enc.privacy_event(), cfg.rounds)],
                          Budget(cfg.budget_epsilon, cfg.delta) if cfg.budget_epsilon else None)

    def participants(self, t: int) -> np.ndarray:
        cfg = self.cfg
        return np.nonzero(participates(cfg.seed, t, cfg.clients, cfg.sampling_rate))[0]

    def client_messages(self, theta: torch.Tensor, t: int, ids: np.ndarray
                        ) -> tuple[np.ndarray, list[bytes], list[dict[str, Any]], dict[str, float]]:
        """Client side of round ``t`` for clients ``ids`` (batched): gradient, clip, encode, bytes.

        Returns the ids that sent a message, their wire bytes, the clients that refused to
        send (with the reason) and the encoder's statistics.
        """
        cfg = self.cfg
        dropped: list[dict[str, Any]] = []
        if not len(ids):
            return ids, [], dropped, {}
        idx = minibatches([self.shards[c] for c in ids], cfg.batch, cfg.seed, t, ids)
        d = self.task.data
        grads = self.task.client_grads(theta, d.x_train[idx], d.y_train[idx]).detach()
        ok = torch.isfinite(grads).all(1).numpy()
        for c in ids[~ok]:
            dropped.append({"client": int(c), "reason": "non-finite gradient rejected on the client"})
        ids, grads = ids[ok], grads[torch.from_numpy(ok)]
        if not len(ids):
            return ids, [], dropped, {}
        msgs = self.enc.encode(grads, encoder_seeds(cfg.seed, t, ids))
        return ids, wire.pack(self.enc, msgs, round=t), dropped, msgs.stats

    def run_round(self, st: RoundState) -> dict[str, Any]:
        assert st.theta is not None
        t = st.round + 1
        sent = self.participants(t)
        ids, blobs, dropped, stats = self.client_messages(st.theta, t, sent)
        return self.server_round(st, t, len(sent), ids, blobs, dropped, stats)

    def server_round(self, st: RoundState, t: int, n_sent: int, ids: np.ndarray, blobs: list[bytes],
                     dropped: list[dict[str, Any]], stats: dict[str, float]) -> dict[str, Any]:
        """Server side of round ``t``: validate and decode the bytes, aggregate, cap, step, evaluate."""
        cfg = self.cfg
        assert st.theta is not None and st.joins is not None
        rec: dict[str, Any] = {"round": t, "clients": int(n_sent), "dropped": list(dropped)}
        if len(ids):
            got, rejected = wire.unpack_lenient(self.enc, blobs, round=t)
            for i, why in rejected:
                rec["dropped"].append({"client": int(ids[i]), "reason": why})
            payload_bits = [8 * (len(b) - wire.HEADER_BYTES) for b in blobs]
            rec["bits_per_client"] = self.enc.payload_bits()
            rec["bytes_per_client"] = float(np.mean(payload_bits)) / 8 + wire.HEADER_BYTES
            rec["encode_stats"] = stats
            if got.n:
                g = self.enc.aggregate(got).to(st.theta.dtype)
                norm = float(torch.linalg.vector_norm(g))
                if norm > cfg.server_cap:
                    g = g * (cfg.server_cap / norm)
                st.theta = st.theta - cfg.lr * g
            st.joins[ids] += 1
            while self.ledger_count() < int(st.joins.max()):
                self.ledger.record(self.enc.privacy_event())
        else:
            rec["bits_per_client"] = 0
        rec.update(self.task.evaluate(st.theta))
        rec["epsilon_spent"] = self.ledger.epsilon(cfg.delta)
        return rec

    def ledger_count(self) -> int:
        return sum(e.count for e in self.ledger.entries)

    # ---------------------------------------------------------------- persistence
    def save(self, out: Path, st: RoundState) -> None:
        assert st.theta is not None and st.joins is not None
        buf = io.BytesIO()
        np.save(buf, st.theta.numpy(), allow_pickle=False)
        atomic_write_bytes(out / "checkpoint_theta.npy", buf.getvalue())
        atomic_write_json(out / "checkpoint.json", {"config": asdict(self.cfg), "round": st.round, "rounds": st.rounds,
                                                    "joins": st.joins.tolist(), "wall_s": st.wall_s})
        self.ledger.write_transcript(out / "transcript.jsonl", delta=self.cfg.delta)

    def load(self, out: Path) -> RoundState:
        ck = json.loads((out / "checkpoint.json").read_text())
        if ck["config"] != asdict(self.cfg):
            diff = sorted(k for k in ck["config"] if ck["config"][k] != asdict(self.cfg).get(k))
            raise ValueError(f"--resume: the checkpoint in {out} was made with a different config ({diff})")
        theta = torch.from_numpy(np.load(out / "checkpoint_theta.npy", allow_pickle=False))
        joins = np.asarray(ck["joins"], dtype=np.int64)
        for _ in range(int(joins.max(initial=0))):
            self.ledger.record(self.enc.privacy_event())
        return RoundState(ck["round"], theta, ck["rounds"], joins, ck["wall_s"])

    def initial_state(self, out: Path, resume: bool) -> RoundState:
        out.mkdir(parents=True, exist_ok=True)
        if resume and (out / "checkpoint.json").exists():
            return self.load(out)
        return RoundState(0, self.task.init_params(self.cfg.seed), [], np.zeros(self.cfg.clients, np.int64))

    def complete_round(self, out: Path, st: RoundState, rec: dict[str, Any], seconds: float, progress: bool) -> None:
        """Record a finished round and checkpoint atomically (metrics, model, joins, transcript)."""
        st.wall_s += seconds
        st.rounds.append(rec)
        st.round += 1
        self.save(out, st)
        for d in rec["dropped"]:
            log.warning("round %d: client %d left out: %s", rec["round"], d["client"], d["reason"])
        if progress:
            metric = rec.get("test_accuracy", rec.get("distance_to_optimum"))
            print(f"\rround {st.round}/{self.cfg.rounds}  loss {rec['train_loss']:.4f}  metric {metric:.4f}  "
                  f"eps {rec['epsilon_spent']:.3g}", end="" if st.round < self.cfg.rounds else "\n", file=sys.stderr,
                  flush=True)

    def train(self, out: str | Path, resume: bool = False, progress: bool | None = None) -> dict[str, Any]:
        out = Path(out)
        st = self.initial_state(out, resume)
        show = sys.stderr.isatty() if progress is None else progress
        while st.round < self.cfg.rounds:
            t0 = time.perf_counter()
            rec = self.run_round(st)
            self.complete_round(out, st, rec, time.perf_counter() - t0, show)
        return self.finish(out, st)

    def finish(self, out: Path, st: RoundState) -> dict[str, Any]:
        last = st.rounds[-1]
        final: dict[str, Any] = {k: last[k] for k in ("test_accuracy", "distance_to_optimum", "train_loss") if k in last}
        final.update({"bits_per_client": self.enc.payload_bits(), "epsilon_total": self.ledger.epsilon(self.cfg.delta),
                      "delta": self.cfg.delta, "wall_s": st.wall_s, "encoder_spec": self.enc.spec,
                      "kashin_level": getattr(getattr(self.enc, "kashin_cfg", None), "level", None)})
        if self.cfg.sampling_rate < 1:
            rep = ldp_plan_report(self.cfg.epsilon, self.cfg.rounds, self.cfg.delta, self.cfg.sampling_rate)
            final["epsilon_amplified"] = {"epsilon": rep["amplified"]["pld"], "threat_model": rep["amplified"]["threat_model"]}
        final["epsilon_threat_model"] = self.ledger.notes["threat_model"]
        metrics = {"config": asdict(self.cfg), "rounds": st.rounds, "final": final, "meta": run_meta()}
        atomic_write_json(out / "metrics.json", metrics)
        plot_run(metrics, out / "curves.png")
        return metrics


def plot_run(metrics: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = metrics["rounds"]
    key = "test_accuracy" if "test_accuracy" in r[-1] else "distance_to_optimum"
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot([x["round"] for x in r], [x["train_loss"] for x in r])
    ax[0].set_xlabel("round")
    ax[0].set_ylabel("training loss")
    ax[1].plot([x["round"] for x in r], [x[key] for x in r])
    ax[1].set_xlabel("round")
    ax[1].set_ylabel(key.replace("_", " "))
    if key == "distance_to_optimum":
        ax[1].set_yscale("log")
    fig.suptitle(f"{metrics['config']['task']} / {metrics['config']['encoder']} / eps={metrics['config']['epsilon']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: RunConfig, out: str | Path, resume: bool = False, progress: bool | None = None) -> dict[str, Any]:
    if cfg.engine == "flower":
        from strategies.sstq_server import run_flower  # Flower stays at the edges

        return run_flower(cfg, Path(out), resume, progress)
    return Trainer(cfg).train(out, resume, progress)
