"""The federated DP workload runner: record-level DP releases on simulated clients, charged to one ledger.

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
  ``PoissonSampledEvent(q, GaussianEvent(σ))`` (Abadi et al., CCS 2016).
* :meth:`DPRunner.record_local_release` — clients privatise their own records and upload only
  sanitised outputs, which the server shuffles; the per-record mechanism is entered once
  (parallel composition across records).
* :meth:`DPRunner.secure_release` (``--trust secagg``) — the additive release without a trusted
  aggregator: each client sends a share of a secure sum (its clipped sums, quantized with
  error-conditioned rounding, plus its own share of discrete Gaussian noise, mod ``2^bits``); the
  server sums the shares mod ``2^bits`` and decodes the noisy sum.  One
  ``DistributedDiscreteGaussianEvent`` (:mod:`sstq_fl.secagg.records`).  In this simulation the
  server process computes the modular sum directly from the shares (no masking protocol runs:
  training's ``--trust secagg`` uses Flower's SecAgg+, the gen workloads do not).

Client work is a registered, named task (:func:`register_client_task`) run by a
:class:`ClientPool`: in-process (:class:`InProcessPool`) or on Flower + Ray
(the ``flower-workload`` backend, :mod:`sstq_fl.backends`).  Only numpy arrays and scalars cross the
client/server boundary.

Randomness (``randomness=``, :data:`sstq_fl.rng.RANDOMNESS_MODES`):

* ``secure`` (what a published ε needs): the server's Gaussian noise is
  :func:`~sstq_fl.rng.secure_normal` and its shuffles :func:`~sstq_fl.rng.secure_permutation`
  (OS CSPRNG; nothing derived from the seed, nothing recorded); each client draws a fresh
  256-bit key from its own OS CSPRNG (:func:`~sstq_fl.rng.fresh_keys`), never sends or logs
  it, and derives its protective coins (Poisson sampling, randomized response) from it with
  ChaCha20.  Whoever holds the seed learns nothing about the noise.
* ``reproducible`` (simulation research): every draw derives from ``(seed, stage, round,
  client)``, so runs repeat and both pools give the same numbers, but **no privacy guarantee
  holds against whoever holds the seed** (:data:`~sstq_fl.rng.REPRODUCIBLE_WARNING`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import rng
from ..data.workload import WorkloadData
from ..privacy.dataset_ledger import DatasetLedger
from ..privacy.events import GaussianEvent, PoissonSampledEvent, PrivacyEvent
from ..privacy.ledger import PrivacyLedger
from ..privacy.replay import transcript_binding
from ..registry import Registry
from ..rng import derive_seed, stream_id
from ..secagg.records import RecordSecAgg
from .pipelines import BUILTINS, PIPELINES
from .releases import CENTRAL_EVENT, SECAGG, SECAGG_ROUND_SEED, SECAGG_SHAPES, SECAGG_TASK, SHARE_TASK, ReleaseDeclaration

log = logging.getLogger("sstq_fl.gen")

Arrays = dict[str, np.ndarray]
Scalar = int | float | str | bool
NONPRIVATE_SUMS = "non-private reference: sums released without noise"  # what non_private_sum records


# ----------------------------------------------------------------------------- client tasks
@dataclass
class ClientContext:
    """One client's view of one task: its id, its records and its private randomness.

    Protective coins (record sampling, randomized response) come from :meth:`uniform` and
    :meth:`randint`.  ``randomness="secure"``: a fresh 256-bit key from this client's OS CSPRNG
    (:func:`sstq_fl.rng.fresh_keys`, drawn on the client, never sent back, never logged), expanded
    by ChaCha20 with one keystream per draw (``stage#k``), so no two draws share coins.
    ``randomness="reproducible"``: the stage's :meth:`generator`, seeded by ``(seed, stage, round,
    client)``.
    """

    cid: int
    x: np.ndarray
    y: np.ndarray
    seed: int
    round: int
    device: str = "cpu"
    randomness: str = "reproducible"
    _key: np.ndarray | None = field(default=None, init=False, repr=False)
    _generators: dict[str, torch.Generator] = field(default_factory=dict, init=False, repr=False)
    _draws: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        rng.check_mode(self.randomness)

    @property
    def secure(self) -> bool:
        return self.randomness == "secure"

    def generator(self, stage: str) -> torch.Generator:
        """The client's torch RNG for ``stage`` in this request (one object per stage: draws continue it).

        Reproducible: seeded by ``(seed, stage, round, client)`` (independent of scheduling).  Secure:
        seeded from ``os.urandom``, for **non-protective** randomness only (e.g. per-example training
        noise inside the clipped loss): a 64-bit torch seed is not a key, so protective coins must come
        from :meth:`uniform` / :meth:`randint` instead."""
        if stage not in self._generators:
            g = torch.Generator(device="cpu")
            seed = int.from_bytes(os.urandom(8), "little") if self.secure else \
                derive_seed(self.seed, stream_id(stage), self.round, self.cid)
            g.manual_seed(seed % (2**63))
            self._generators[stage] = g
        return self._generators[stage]

    def _stream(self, stage: str) -> tuple[np.ndarray, str]:
        """This client's secret key (drawn once per request) and a fresh stream name for the next draw."""
        if self._key is None:
            self._key = rng.fresh_keys(1)
        k = self._draws.get(stage, 0)
        self._draws[stage] = k + 1
        return self._key, f"{stage}#{k}"

    def uniform(self, stage: str, n: int) -> np.ndarray:
        """``n`` protective uniforms in ``[0, 1)`` (ChaCha20 under the client's key, or the stage generator)."""
        if not self.secure:
            return torch.rand(n, generator=self.generator(stage)).numpy()
        return rng.uniform(*self._stream(stage), n)[0]

    def coins(self, stage: str) -> np.random.Generator:
        """A numpy generator of protective coins for ``stage`` (a secure-aggregation share's rounding and noise):
        secure, Philox-4x64 keyed with 128 bits of a fresh OS-CSPRNG key (drawn here, never sent or logged);
        reproducible, PCG64 seeded by ``(seed, stage, round, client)`` (simulation only)."""
        if self.secure:
            k = rng.fresh_keys(1)[0]
            return np.random.Generator(np.random.Philox(key=int(k[0]) | (int(k[1]) << 64)))
        return np.random.Generator(np.random.PCG64(derive_seed(self.seed, stream_id(stage), self.round, self.cid)))

    def randint(self, stage: str, n: int, low: int, high: int) -> np.ndarray:
        """``n`` protective integers uniform on ``{low, …, high−1}`` (as :meth:`uniform`)."""
        if high <= low:
            raise ValueError(f"randint needs low < high, got {low}, {high}")
        if not self.secure:
            return torch.randint(low, high, (n,), generator=self.generator(stage)).numpy()
        return low + rng.randint(*self._stream(stage), n, high - low)[0]


ClientTask = Callable[[ClientContext, Arrays, dict[str, Scalar]], Arrays]


@dataclass(frozen=True)
class RegisteredTask:
    """A client task: the function a client runs and the declaration of what its reply releases."""

    run: ClientTask
    release: ReleaseDeclaration


CLIENT_TASKS: Registry[RegisteredTask] = Registry("client task",
                                                  builtins=("sstq_fl.gen.dpsgd", "sstq_fl.gen.client_tasks", *BUILTINS))
"""Client tasks by name: the shared ones (:mod:`sstq_fl.gen.dpsgd`, :mod:`sstq_fl.gen.client_tasks`) and each pipeline's,
registered when its package is imported."""


def register_client_task(name: str, release: ReleaseDeclaration) -> Callable[[ClientTask], ClientTask]:
    """Register ``fn(ctx, payload, config) -> arrays`` as client task ``name`` with the declaration of what its
    reply releases (:mod:`sstq_fl.gen.releases`; a taken name is refused)."""
    if not isinstance(release, ReleaseDeclaration):
        raise TypeError(f"client task {name!r}: release must be a ReleaseDeclaration (sstq_fl.gen.releases), "
                        f"got {release!r}")

    def deco(fn: ClientTask) -> ClientTask:
        CLIENT_TASKS.register(name, RegisteredTask(fn, release))
        return fn

    return deco


def registered_task(name: str) -> RegisteredTask:
    """The client task ``name``: a built-in one, or one a plug-in pipeline registers when it is loaded."""
    if name not in CLIENT_TASKS:
        PIPELINES.load()
    return CLIENT_TASKS[name]


def client_task(name: str) -> ClientTask:
    """The function of client task ``name`` (:func:`registered_task`)."""
    return registered_task(name).run


def deterministic_kernels(device: str, randomness: str) -> None:
    """In reproducible mode on CUDA, make PyTorch choose deterministic kernels (and cuBLAS a fixed
    workspace), so that a run repeats: CUDA's default kernels reduce in a nondeterministic order, and
    reproducible runs would otherwise differ in their last digits and, through training, in their
    metrics.  Call before the process's first cuBLAS call; secure mode leaves PyTorch's defaults
    (nothing to repeat)."""
    if randomness == "reproducible" and str(device).startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)


def run_client_task(data: WorkloadData, cid: int, task: str, payload: Arrays, config: dict[str, Scalar],
                    seed: int, round: int) -> Arrays:
    """What a client does for one request (the same code in-process and in the Flower ClientApp)."""
    deterministic_kernels(str(config.get("device", "cpu")), str(config.get("randomness", "reproducible")))
    x, y = data.client_records(cid)
    ctx = ClientContext(cid, x, y, seed, round, str(config.get("device", "cpu")),
                        str(config.get("randomness", "reproducible")))
    out = client_task(task)(ctx, payload, config)
    for k, v in out.items():
        if not np.all(np.isfinite(v)):
            raise ValueError(f"client {cid}: task {task} produced non-finite values in {k!r}")
    return out


class ClientPool(ABC):
    """Runs a named client task on every client and returns ``{client: arrays}``.

    A client that failed is absent from the result and listed in ``self.dropped`` (client
    dropout that is independent of the data is safe: it cannot depend on any one record)."""

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


def feeds(event: PrivacyEvent) -> dict[str, Scalar]:
    """The task-config entry naming the central ``event`` a trusted aggregator's sums feed
    (:data:`~sstq_fl.gen.releases.CENTRAL_EVENT`), which a client records on its own ledger."""
    return {CENTRAL_EVENT: json.dumps(event.to_json(), sort_keys=True)}


class DPRunner:
    """Executes a pipeline's releases on a :class:`ClientPool` and charges each to the ledger.

    ``randomness`` (``secure`` or ``reproducible``, see the module docstring) travels to every
    client in the task config and chooses the server's noise and shuffle sources."""

    def __init__(self, pool: ClientPool, pipeline: str, relation: str, seed: int = 0, run_id: str | None = None,
                 randomness: str = "secure"):
        self.pool, self.pipeline, self.seed = pool, pipeline, seed
        self.randomness = rng.check_mode(randomness)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.ledger = PrivacyLedger(relation, notes={"pipeline": pipeline, "run_id": self.run_id, "randomness": randomness,
                                                     "guarantee": "record-level", "data": asdict(pool.data)})
        self._round = 0

    @property
    def n_decl(self) -> int:
        return self.pool.data.n_decl

    def _map(self, task: str, payload: Arrays, config: dict[str, Scalar], round: int) -> dict[int, Arrays]:
        return self.pool.map(task, payload, {**config, "randomness": self.randomness}, self.seed, round)

    def _server_noise(self, stage: str, round: int, shape: tuple[int, ...], std: float) -> np.ndarray:
        """``N(0, std² I)``: OS-CSPRNG noise (secure), or seeded by ``(seed, stage, round)`` (reproducible)."""
        if self.randomness == "secure":
            return rng.secure_normal(shape, std)
        g = np.random.default_rng(derive_seed(self.seed, stream_id("server-noise:" + stage), round))
        return g.normal(0.0, std, size=shape)

    def _permutation(self, stage: str, n: int) -> np.ndarray:
        if self.randomness == "secure":
            return rng.secure_permutation(n)
        return np.random.default_rng(derive_seed(self.seed, stream_id("shuffle:" + stage))).permutation(n)

    def _record(self, event: PrivacyEvent, stage: str, meta: dict[str, Any], outs: dict[int, Arrays],
                count: int = 1) -> None:
        from .. import __version__

        log.log(logging.DEBUG if self._round else logging.INFO,  # one line per release; DP-SGD rounds at DEBUG
                "%s %s: %d client(s) answered; charged %d x %s", self.pipeline, stage, len(outs), count, event)
        self.ledger.record(event, count, meta={"run_id": self.run_id, "pipeline": self.pipeline, "stage": stage,
                                               "relation": self.ledger.relation, "client_ids": sorted(outs),
                                               "randomness": self.randomness, "code_version": __version__, **meta})

    def _noise_std(self, bound: float, noise_multiplier: float, sensitivity: float | None) -> tuple[float, float]:
        """``(std, Δ)`` of an additive release.  ``GaussianEvent(σ)`` means ``N(0, σ²C²)`` with neighbouring
        outputs ``2C`` apart under replace-one (``C`` under add/remove).  Without a declared sensitivity
        ``C = bound``, so ``Δ = 2·bound`` (replace-one); a declared replace-one ℓ2 shift ``Δ ≤ 2·bound``
        sets ``C = Δ/2``, i.e. ``std = σ·Δ/2``, and the event keeps its meaning."""
        if not (bound > 0 and noise_multiplier > 0):
            raise ValueError(f"bound and noise multiplier must be positive, got {bound}, {noise_multiplier}")
        replace = self.ledger.relation == "replace_one"
        if sensitivity is None:
            return noise_multiplier * bound, (2 if replace else 1) * bound
        if not replace:
            raise ValueError(f"a declared sensitivity is a replace-one shift; this ledger is {self.ledger.relation}")
        if not 0 < sensitivity <= 2 * bound * (1 + 1e-12):
            raise ValueError(f"sensitivity must be in (0, 2*bound] = (0, {2 * bound:.6g}], got {sensitivity}")
        return noise_multiplier * sensitivity / 2, sensitivity

    def additive_release(self, stage: str, task: str, payload: Arrays, config: dict[str, Scalar], bound: float,
                         noise_multiplier: float, normalize: bool = False, sensitivity: float | None = None) -> Arrays:
        """Σ over clients of the task's arrays (each record's joint contribution clipped to ``bound`` on the
        client), plus ``N(0, std² I)`` on the concatenation, once; ÷ ``N_decl`` if ``normalize``.

        ``std = σ·bound``, or ``σ·Δ/2`` when the caller declares the release's replace-one ℓ2 sensitivity
        ``Δ`` (max over neighbouring data sets of ‖f(D) − f(D')‖₂, at most ``2·bound`` by the triangle
        inequality); either way ``GaussianEvent(σ)`` is charged (:meth:`_noise_std`)."""
        std, shift = self._noise_std(bound, noise_multiplier, sensitivity)
        event = GaussianEvent(noise_multiplier)
        outs = self._map(task, payload, {**config, "bound": bound, **feeds(event)}, 0)
        sums = _sum_outputs(outs)
        noisy = {k: v + self._server_noise(stage + ":" + k, 0, v.shape, std) for k, v in sums.items()}
        self._record(event, stage, {"contribution_bound": bound, "sensitivity": shift,
                                                              "std": std, "q": None, "count": 1, "eps0": None}, outs)
        return {k: v / self.n_decl for k, v in noisy.items()} if normalize else noisy

    def secure_release(self, stage: str, task: str, payload: Arrays, config: dict[str, Scalar], bound: float,
                       release: RecordSecAgg, shapes: dict[str, tuple[int, ...]], normalize: bool = False) -> Arrays:
        """The sums of the additive ``task`` (shapes ``shapes``, public) through secure aggregation: each client runs
        ``task`` on its records, flattens its sums and answers with its share under ``release``
        (:data:`~sstq_fl.gen.releases.SHARE_TASK`); the server sums the shares mod ``2^bits``, decodes and records
        ``release.event()``; ÷ ``N_decl`` if ``normalize``.

        ``release.clients`` shares must arrive (the event is charged for that many noise shares): with fewer, the
        sum would carry less noise than accounted, and nothing is decoded or released (``RuntimeError``)."""
        from ..secagg.records import flat_dim, unflatten

        if release.relation != self.ledger.relation:
            raise ValueError(f"the release is accounted under {release.relation}; this ledger is {self.ledger.relation}")
        if flat_dim(shapes) != release.codec.dim:
            raise ValueError(f"the shapes flatten to {flat_dim(shapes)} values, the release encodes {release.codec.dim}")
        rotation = derive_seed(self.seed, stream_id("secagg-rotation:" + stage))  # public: no privacy rests on it
        conf = {**config, "bound": bound, SECAGG_TASK: task, SECAGG: json.dumps(release.to_json(), sort_keys=True),
                SECAGG_SHAPES: json.dumps({k: list(v) for k, v in shapes.items()}, sort_keys=True),
                SECAGG_ROUND_SEED: rotation}
        outs = self._map(SHARE_TASK, payload, conf, 0)
        if len(outs) < release.clients:
            raise RuntimeError(f"{stage}: {len(outs)} of the {release.clients} shares the release is accounted for "
                               f"arrived; their sum would carry less noise than charged, so nothing is released")
        shares = np.stack([np.asarray(outs[c]["share"]) for c in sorted(outs)])
        if shares.dtype != np.int64:
            raise ValueError(f"{stage}: shares must be int64 arrays in Z_m, got {shares.dtype}")
        modsum = release.modular_sum(shares)
        sums = unflatten(release.decode(modsum, rotation), shapes)
        digest = hashlib.sha256(np.ascontiguousarray(modsum).tobytes()).hexdigest()
        self._record(release.event(), stage,
                     {"contribution_bound": bound, "sensitivity": release.shift, "std": release.central_stddev(len(outs)),
                      "q": None, "count": 1, "eps0": None, "trust": "secagg", "secagg": release.notes(),
                      "rotation_seed": rotation, "modular_sum_sha256": digest}, outs)
        return {k: v / self.n_decl for k, v in sums.items()} if normalize else sums

    def non_private_sum(self, stage: str, task: str, payload: Arrays, config: dict[str, Scalar], bound: float) -> Arrays:
        """The same sums **without noise** (a non-private reference); the ledger records it as such (ε = ∞)."""
        from ..privacy.events import NonPrivateEvent

        event = NonPrivateEvent(NONPRIVATE_SUMS)
        outs = self._map(task, payload, {**config, "bound": bound, **feeds(event)}, 0)
        self._record(event, stage,
                     {"contribution_bound": bound, "std": 0.0, "q": None, "count": 1, "eps0": None}, outs)
        return _sum_outputs(outs)

    def dpsgd_round(self, stage: str, task: str, params: Arrays, config: dict[str, Scalar], q: float, clip: float,
                    noise_multiplier: float) -> Arrays:
        """One DP-SGD step's noisy gradient ``(Σ clipped sums + N(0, σ²C² I)) / (q·N_decl)``."""
        if not (0 < q <= 1 and clip > 0 and noise_multiplier > 0):
            raise ValueError(f"need 0 < q <= 1, clip > 0, noise multiplier > 0; got {q}, {clip}, {noise_multiplier}")
        self._round += 1
        event = PoissonSampledEvent(q, GaussianEvent(noise_multiplier))
        outs = self._map(task, params, {**config, "q": q, "clip": clip, **feeds(event)}, self._round)
        sums = _sum_outputs(outs)
        std = noise_multiplier * clip
        grads = {k: (v + self._server_noise(stage + ":" + k, self._round, v.shape, std)) / (q * self.n_decl)
                 for k, v in sums.items()}
        self._record(event, stage,
                     {"contribution_bound": clip, "std": std, "q": q, "count": 1, "eps0": None, "round": self._round}, outs)
        return grads

    def record_local_release(self, stage: str, task: str, payload: Arrays, config: dict[str, Scalar],
                             per_record_event: PrivacyEvent, eps0: float | None = None, count: int = 1,
                             also: Sequence[tuple[PrivacyEvent, int]] = ()) -> Arrays:
        """Clients privatise their own records (the task applies ``per_record_event``'s mechanism to
        each record ``count`` times, e.g. one exponential-mechanism draw per token location, and each
        ``(event, n)`` of ``also`` ``n`` times, e.g. the label's randomized response) and upload sanitised
        rows; the server concatenates and shuffles them.

        Records compose in parallel, so the record-level charge is the per-record composition, entered
        once: ``per_record_event`` **with its count** (the ledger composes ``count`` runs; never a single
        event standing for ``count`` draws) and each event of ``also`` with its own, one transcript line each."""
        outs = self._map(task, payload, config, 0)
        rows = {k: np.concatenate([np.asarray(outs[c][k]) for c in sorted(outs)]) for k in next(iter(outs.values()))}
        n = len(next(iter(rows.values())))
        perm = self._permutation(stage, n)
        for i, (event, times) in enumerate([(per_record_event, count), *also]):
            self._record(event, stage, {"contribution_bound": None, "std": None, "q": None, "count": times,
                                        "eps0": eps0 if i == 0 else None, "records": n}, outs, count=times)
        return {k: v[perm] for k, v in rows.items()}

    def charge_public(self, stage: str, note: str) -> None:
        """Note a step that touches public data or released quantities only (post-processing)."""
        from ..privacy.events import PublicDataEvent

        self.ledger.record(PublicDataEvent(), subset="public", note=f"{stage}: {note}")

    def finish(self, out: Path, delta: float, dataset: DatasetLedger | None = None) -> dict[str, Any]:
        """Write ``out/transcript.jsonl`` (replayable), append this run to ``dataset``'s ledger (if given) and
        return ``{epsilon, delta, relation, randomness, privacy_transcript[, dataset_epsilon_cumulative, …]}``."""
        self.ledger.mark_complete()
        path = out / "transcript.jsonl"
        self.ledger.write_transcript(path, delta=delta)
        eps = self.ledger.epsilon(delta)
        res: dict[str, Any] = {"epsilon": eps if math.isfinite(eps) else None, "delta": delta,
                               "relation": self.ledger.relation, "accountant": self.ledger.accountant(),
                               "randomness": self.randomness,
                               "privacy_transcript": transcript_binding(path)}
        if self.randomness == "reproducible":
            res["randomness_warning"] = rng.REPRODUCIBLE_WARNING
        if dataset is not None:
            res.update(dataset.append(self.ledger, self.run_id, self.pipeline, delta, self.randomness))
        return res


_ATTACHED: list[Callable[[WorkloadData], ClientPool]] = []


@contextmanager
def attached_pool(factory: Callable[[WorkloadData], ClientPool]) -> Iterator[None]:
    """Within the block, ``engine="flower"`` workloads use ``factory(data)``'s pool: the federation a
    ServerApp already runs in (``flwr run``, docker/) instead of starting a simulation of their own."""
    _ATTACHED.append(factory)
    try:
        yield
    finally:
        _ATTACHED.pop()


def run_workload(pipeline: Callable[[ClientPool], dict[str, Any]], data: WorkloadData, engine: str = "inprocess",
                 device: str = "cpu") -> dict[str, Any]:
    """Run ``pipeline(pool)`` with its clients in-process or on Flower + Ray (``engine="flower"``: the
    attached federation where there is one, :func:`attached_pool`, else a Flower simulation)."""
    if engine == "inprocess":
        return pipeline(InProcessPool(data))
    if engine == "flower" and _ATTACHED:
        return pipeline(_ATTACHED[-1](data))
    if engine == "flower":
        from ..backends import backend  # Flower stays at the edges: found by entry point

        return backend("flower-workload")(pipeline, data, device)
    raise ValueError(f"engine must be 'inprocess' or 'flower', got {engine!r}")
