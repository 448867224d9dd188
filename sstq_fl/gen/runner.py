"""The federated DP workload runner (generative-pipelines spec §1.2–§1.3).

Private records are partitioned over simulated clients; the guarantee is **record-level**
under one neighbouring relation, and every mechanism is charged to one
:class:`~sstq_fl.privacy.ledger.PrivacyLedger` whose transcript holds one line per execution.
Three release shapes cover the three pipelines:

* :meth:`DPRunner.additive_release` — clients send local sums ``Σ_i φ(r_i)`` of contributions
  bounded by ``b = sup‖φ‖`` (enforced on the client by clipping); the server adds
  ``N(0, (σb)² I)`` **once** and may normalise by the public ``N_decl``.  One
  ``GaussianEvent(σ)`` (the relation sets the shift: ``2b`` under replace-one).
* :meth:`DPRunner.dpsgd_round` — one DP-SGD step: each client includes each of its records
  independently with probability ``q`` (the union is Poisson sampling at rate ``q``), returns
  the **sum** of per-example gradients clipped to ``C`` (zero when nothing was sampled, never a
  count); the server forms ``g̃ = (Σ sums + N(0, σ²C² I)) / (q·N_decl)``.
  ``PoissonSampledEvent(q, GaussianEvent(σ))`` (Abadi et al. 2016).
* :meth:`DPRunner.record_local_release` — clients privatise their own records and upload only
  sanitised outputs, which the server shuffles; the per-record mechanism is entered once
  (parallel composition across records).

Client work is a registered, named task (:func:`register_client_task`) run by a
:class:`ClientPool`: in-process (:class:`InProcessPool`) or on Flower + Ray
(``strategies.gen_server.FlowerPool``).  A task depends only on its arguments, the client's
own records and a seed derived from ``(seed, stage, round, client)``, so both pools give
the same numbers.  Only numpy arrays and scalars cross the client/server boundary.
"""

from __future__ import annotations

import json
import math
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..privacy.events import GaussianEvent, PoissonSampledEvent, PrivacyEvent
from ..privacy.ledger import PrivacyLedger
from ..rng import derive_seed, stream_id

Arrays = dict[str, np.ndarray]
Scalar = int | float | str | bool


# ----------------------------------------------------------------------------- client data
@dataclass(frozen=True)
class WorkloadData:
    """What every client can load by itself: the data set, the partition and the seed.

    ``dataset``: ``mnist-subset`` (the private MNIST subset's ``priv_train``, spec §1.1),
    ``fmnist`` (Fashion-MNIST train, the FMNIST-private configuration) or ``synthetic``
    (small Gaussian class blobs, for tests).  ``records`` keeps a class-stratified subset of
    that many records (the CPU profiles' 2,000); ``N_decl`` is the kept size.
    """

    dataset: str = "mnist-subset"
    clients: int = 4
    partition: str = "iid"
    alpha: float = 0.5
    seed: int = 0
    records: int = 0
    data_path: str = ""

    def __post_init__(self) -> None:
        if self.dataset not in ("mnist-subset", "fmnist", "synthetic"):
            raise ValueError(f"unknown dataset {self.dataset!r} (mnist-subset, fmnist or synthetic)")
        if self.clients < 1 or self.records < 0:
            raise ValueError(f"clients must be >= 1 and records >= 0, got {self.clients}, {self.records}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WorkloadData:
        return cls(**json.loads(text))

    @property
    def n_decl(self) -> int:
        return int(_records(self.to_json())[1].shape[0])

    def client_records(self, cid: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``cid``'s own records ``(x [n,1,28,28] in [0,1], y)``."""
        if not 0 <= cid < self.clients:
            raise ValueError(f"client {cid} out of range (clients={self.clients})")
        x, y, shards = _records(self.to_json())
        return x[shards[cid]], y[shards[cid]]


def synthetic_records(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 28×28 images: class ``k`` lights a 7×7 block at a class-specific place, plus noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 10
    x = rng.uniform(0, 0.2, size=(n, 1, 28, 28)).astype(np.float32)
    for k in range(10):
        r, c = divmod(k, 4)
        x[y == k, 0, 7 * r:7 * r + 7, 7 * c:7 * c + 7] += 0.8
    return x.clip(0, 1), y.astype(np.int64)


def _stratified_subset(y: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Exactly ``k`` indices, per class in proportion to its frequency (largest remainders), seeded."""
    order = np.random.default_rng(seed).permutation(len(y))
    classes, freq = np.unique(y, return_counts=True)
    share = k * freq / len(y)
    per = np.floor(share).astype(int)
    per[np.argsort(-(share - per), kind="stable")[:k - per.sum()]] += 1
    keep = [i for c, n in zip(classes, per) for i in order[y[order] == c][:n]]
    return np.sort(np.asarray(keep, dtype=np.int64))


@lru_cache(maxsize=4)
def _records(spec: str) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    from .data import load_private_split, partition_records

    d = json.loads(spec)
    if d["dataset"] == "synthetic":
        x, y = synthetic_records(d["records"] or 400, d["seed"])
    elif d["dataset"] == "fmnist":
        from ..data.idx import load_fashion_mnist

        xtr, ytr, _, _ = load_fashion_mnist(d["data_path"] or None)
        x, y = (np.asarray(xtr, np.float32).reshape(-1, 1, 28, 28) / (255.0 if xtr.max() > 1 else 1.0)), np.asarray(ytr)
    else:
        split = load_private_split(d["data_path"] or None)
        x, y = split.train_x, split.train_y
    if d["records"] and d["records"] < len(y):
        keep = _stratified_subset(y, d["records"], d["seed"])
        x, y = x[keep], y[keep]
    shards = partition_records(y.astype(np.int64), d["clients"], d["partition"],
                               d["alpha"] if d["partition"] == "dirichlet" else None, d["seed"])
    return x, y.astype(np.int64), shards


# ----------------------------------------------------------------------------- client tasks
@dataclass
class ClientContext:
    """One client's view of one task: its id, its records and its private randomness."""

    cid: int
    x: np.ndarray
    y: np.ndarray
    seed: int
    round: int
    device: str = "cpu"

    def generator(self, stage: str) -> torch.Generator:
        """The client's own RNG for ``(seed, stage, round, client)`` (independent of scheduling)."""
        g = torch.Generator(device="cpu")
        g.manual_seed(derive_seed(self.seed, stream_id(stage), self.round, self.cid) % (2**63))
        return g


ClientTask = Callable[[ClientContext, Arrays, dict[str, Scalar]], Arrays]
_TASKS: dict[str, ClientTask] = {}


def register_client_task(name: str) -> Callable[[ClientTask], ClientTask]:
    """Register ``fn(ctx, payload, config) -> arrays`` as client task ``name`` (must not exist)."""

    def deco(fn: ClientTask) -> ClientTask:
        if name in _TASKS and _TASKS[name] is not fn:
            raise ValueError(f"client task {name!r} is already registered")
        _TASKS[name] = fn
        return fn

    return deco


def client_task(name: str) -> ClientTask:
    if name not in _TASKS:
        import importlib

        importlib.import_module("sstq_fl.gen.tasks")  # the built-in tasks register on import
    if name not in _TASKS:
        raise KeyError(f"unknown client task {name!r}; registered: {sorted(_TASKS)}")
    return _TASKS[name]


def run_client_task(data: WorkloadData, cid: int, task: str, payload: Arrays, config: dict[str, Scalar],
                    seed: int, round: int) -> Arrays:
    """What a client does for one request (the same code in-process and in the Flower ClientApp)."""
    x, y = data.client_records(cid)
    ctx = ClientContext(cid, x, y, seed, round, str(config.get("device", "cpu")))
    out = client_task(task)(ctx, payload, config)
    for k, v in out.items():
        if not np.all(np.isfinite(v)):
            raise ValueError(f"client {cid}: task {task} produced non-finite values in {k!r}")
    return out


class ClientPool(ABC):
    """Runs a named client task on every client and returns ``{client: arrays}``.

    A client that failed is absent from the result and listed in ``self.dropped`` (client
    dropout that is independent of the data is safe, spec §1.3)."""

    def __init__(self, data: WorkloadData):
        self.data = data
        self.dropped: list[dict[str, Any]] = []

    @abstractmethod
    def map(self, task: str, payload: Arrays, config: dict[str, Scalar], seed: int, round: int) -> dict[int, Arrays]:
        ...


class InProcessPool(ClientPool):
    """Every client in this process, in client order."""

    def map(self, task: str, payload: Arrays, config: dict[str, Scalar], seed: int, round: int) -> dict[int, Arrays]:
        return {c: run_client_task(self.data, c, task, payload, config, seed, round) for c in range(self.data.clients)}


# ----------------------------------------------------------------------------- the runner
def _sum_outputs(outs: dict[int, Arrays]) -> Arrays:
    if not outs:
        raise RuntimeError("no client answered; nothing to release")
    first = next(iter(outs.values()))
    return {k: np.sum([np.asarray(o[k], np.float64) for o in outs.values()], axis=0) for k in sorted(first)}


class DPRunner:
    """Executes a pipeline's releases on a :class:`ClientPool` and charges each to the ledger."""

    def __init__(self, pool: ClientPool, pipeline: str, relation: str, seed: int = 0, run_id: str | None = None):
        self.pool, self.pipeline, self.seed = pool, pipeline, seed
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.ledger = PrivacyLedger(relation, notes={"pipeline": pipeline, "run_id": self.run_id,
                                                     "guarantee": "record-level", "data": asdict(pool.data)})
        self._round = 0

    @property
    def n_decl(self) -> int:
        return self.pool.data.n_decl

    def _server_noise(self, stage: str, round: int, shape: tuple[int, ...], std: float) -> np.ndarray:
        rng = np.random.default_rng(derive_seed(self.seed, stream_id("server-noise:" + stage), round))
        return rng.normal(0.0, std, size=shape)

    def _record(self, event: PrivacyEvent, stage: str, meta: dict[str, Any], outs: dict[int, Arrays]) -> None:
        from .. import __version__

        self.ledger.record(event, meta={"run_id": self.run_id, "pipeline": self.pipeline, "stage": stage,
                                        "relation": self.ledger.relation, "client_ids": sorted(outs),
                                        "code_version": __version__, **meta})

    def additive_release(self, stage: str, task: str, payload: Arrays, config: dict[str, Scalar], bound: float,
                         noise_multiplier: float, normalize: bool = False) -> Arrays:
        """Σ over clients of the task's arrays (each record's joint contribution ≤ ``bound``), plus
        ``N(0, (noise_multiplier·bound)² I)`` on the concatenation, once; ÷ ``N_decl`` if ``normalize``."""
        if not (bound > 0 and noise_multiplier > 0):
            raise ValueError(f"bound and noise multiplier must be positive, got {bound}, {noise_multiplier}")
        outs = self.pool.map(task, payload, {**config, "bound": bound}, self.seed, 0)
        sums = _sum_outputs(outs)
        std = noise_multiplier * bound
        noisy = {k: v + self._server_noise(stage + ":" + k, 0, v.shape, std) for k, v in sums.items()}
        self._record(GaussianEvent(noise_multiplier), stage, {"contribution_bound": bound, "std": std, "q": None,
                                                              "count": 1, "eps0": None}, outs)
        return {k: v / self.n_decl for k, v in noisy.items()} if normalize else noisy

    def non_private_sum(self, stage: str, task: str, payload: Arrays, config: dict[str, Scalar], bound: float) -> Arrays:
        """The same sums **without noise** (a non-private reference); the ledger records it as such (ε = ∞)."""
        from ..privacy.events import NonPrivateEvent

        outs = self.pool.map(task, payload, {**config, "bound": bound}, self.seed, 0)
        self._record(NonPrivateEvent("non-private reference: sums released without noise"), stage,
                     {"contribution_bound": bound, "std": 0.0, "q": None, "count": 1, "eps0": None}, outs)
        return _sum_outputs(outs)

    def dpsgd_round(self, stage: str, task: str, params: Arrays, config: dict[str, Scalar], q: float, clip: float,
                    noise_multiplier: float) -> Arrays:
        """One DP-SGD step's noisy gradient ``(Σ clipped sums + N(0, σ²C² I)) / (q·N_decl)``."""
        if not (0 < q <= 1 and clip > 0 and noise_multiplier > 0):
            raise ValueError(f"need 0 < q <= 1, clip > 0, noise multiplier > 0; got {q}, {clip}, {noise_multiplier}")
        self._round += 1
        outs = self.pool.map(task, params, {**config, "q": q, "clip": clip}, self.seed, self._round)
        sums = _sum_outputs(outs)
        std = noise_multiplier * clip
        grads = {k: (v + self._server_noise(stage + ":" + k, self._round, v.shape, std)) / (q * self.n_decl)
                 for k, v in sums.items()}
        self._record(PoissonSampledEvent(q, GaussianEvent(noise_multiplier)), stage,
                     {"contribution_bound": clip, "std": std, "q": q, "count": 1, "eps0": None, "round": self._round}, outs)
        return grads

    def record_local_release(self, stage: str, task: str, payload: Arrays, config: dict[str, Scalar],
                             per_record_event: PrivacyEvent, eps0: float | None = None) -> Arrays:
        """Clients privatise their own records (the task applies ``per_record_event``'s mechanism to
        each record) and upload sanitised rows; the server concatenates and shuffles them."""
        outs = self.pool.map(task, payload, config, self.seed, 0)
        rows = {k: np.concatenate([np.asarray(outs[c][k]) for c in sorted(outs)]) for k in next(iter(outs.values()))}
        n = len(next(iter(rows.values())))
        perm = np.random.default_rng(derive_seed(self.seed, stream_id("shuffle:" + stage))).permutation(n)
        self._record(per_record_event, stage, {"contribution_bound": None, "std": None, "q": None, "count": 1,
                                               "eps0": eps0, "records": n}, outs)
        return {k: v[perm] for k, v in rows.items()}

    def charge_public(self, stage: str, note: str) -> None:
        """Note a step that touches public data or released quantities only (post-processing)."""
        from ..privacy.events import PublicDataEvent

        self.ledger.record(PublicDataEvent(), subset="public", note=f"{stage}: {note}")

    def finish(self, out: Path, delta: float) -> dict[str, Any]:
        """Write ``out/transcript.jsonl`` (replayable) and return ``{epsilon, delta, relation}``."""
        self.ledger.write_transcript(out / "transcript.jsonl", delta=delta)
        eps = self.ledger.epsilon(delta)
        return {"epsilon": eps if math.isfinite(eps) else None, "delta": delta, "relation": self.ledger.relation,
                "accountant": "pld"}


def run_workload(pipeline: Callable[[ClientPool], dict[str, Any]], data: WorkloadData, engine: str = "inprocess",
                 device: str = "cpu") -> dict[str, Any]:
    """Run ``pipeline(pool)`` with its clients in-process or on Flower + Ray (``engine="flower"``)."""
    if engine == "inprocess":
        return pipeline(InProcessPool(data))
    if engine == "flower":
        from strategies.gen_server import run_on_flower  # Flower stays at the edges

        return run_on_flower(pipeline, data, device)
    raise ValueError(f"engine must be 'inprocess' or 'flower', got {engine!r}")
