"""DP-MEPF end to end (generative-pipelines spec §4; Harder, Jalali Asadabadi, Sutherland & Park,
"Pre-trained Perceptual Features Improve Differentially Private Image Generation", TMLR 2023).

1. Φ, a feature extractor trained **non-privately on public Fashion-MNIST**, fixed before any
   private data is touched (its fingerprint goes into the transcript).
2. One labelled release on the simulated clients: each client sends the counts and per-class
   sums of its records' unit-normalised moments ``(e_y, φ₁⊗e_y[, φ₂⊗e_y])`` (per-record norm
   ``b = √(1+m)``, clipped on the client); the server adds ``N(0, (σΔ/2)² I)`` once, where
   ``Δ = max(√(2(1+m)), 2√m)`` is the release's replace-one sensitivity
   (:func:`~sstq_fl.gen.mepf.replace_one_sensitivity`; tighter than ``2b``).  Under
   ``REPLACE_ONE`` this is ``GaussianEvent(σ)`` with σ calibrated on the ledger to ``(ε, δ)``;
   the run is also appended to the private data set's ledger
   (:mod:`sstq_fl.privacy.dataset_ledger`), which can refuse it before any private record is
   read when the data set's cumulative ε would exceed ``dataset_budget_epsilon``.
3. Post-processing only: ``μ̃_y = S̃_y / max(ñ_y, 1)`` (never raw counts) and a generator
   trained for a fixed number of steps to match ``μ̃`` (no early stopping on private data).
4. Offline evaluation (§1.4): LeNet-5 probe accuracy on the real ``priv_test`` split and the
   domain-FD (not comparable to Inception FID) against a class-balanced real subset, a sample
   grid, the replayable transcript.

Randomness: ``secure`` (default; server noise from the OS CSPRNG, nothing derived from the
seed) or ``reproducible`` (simulation research; the seed determines the noise, so no guarantee
holds against whoever holds it).

References that the ε sweep needs: ``epsilon=inf`` releases without noise (a
``NonPrivateEvent`` is recorded, so the ledger says ε = ∞), and ``public_only`` trains the
generator on public Fashion-MNIST statistics alone (zero information about the private set).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import rng
from ..io import atomic_write_json, clear_out, run_meta
from ..privacy.calibrate import calibrate_noise_multiplier
from ..privacy.dataset_ledger import DatasetLedger
from ..privacy.events import GaussianEvent, NonPrivateEvent, PrivacyEvent
from ..progress import PhaseClock, progress
from .runner import ClientPool, DPRunner, WorkloadData, check_dp_target, deterministic_kernels, run_workload

log = logging.getLogger("sstq_fl.gen")
PIPELINE = "dp-mepf"
RELATION = "replace_one"
MAX_EPSILON = 100.0
"""The largest finite ε a release is calibrated for.  At ε = 100 (δ = 1e-5) σ = 0.19, and one PLD
evaluation of ``GaussianEvent(σ)`` takes about 9 s and 0.5 GB here, growing as 1/σ²; near ε = 500
the ledger refuses it (``AccountingLimitError``), and ``--epsilon 1e6`` calibrated for 10 minutes
in 8.9 GB before this limit.  Such an ε guarantees nothing: ``inf`` is the non-private reference."""
RUN_FILES = ("metrics.json", "transcript.jsonl", "samples.png")


@dataclass(frozen=True)
class MepfConfig:
    """A DP-MEPF run (spec §4.3 profiles); with ``randomness="reproducible"`` the ``seed`` determines every number.

    ``dataset_ledger``: the private data set's ledger file ("" = ``~/.cache/sstq-fl/ledgers/<digest>.jsonl``);
    ``dataset_budget_epsilon``: refuse the run when the data set's cumulative ε (at ``delta``) would exceed it."""

    epsilon: float = 1.0
    delta: float = 1e-5
    profile: str = "cpu"
    clients: int = 4
    moments: tuple[int, ...] = (1,)
    records: int | None = None  # private records used (None: profile default; 0: all of priv_train)
    partition: str = "iid"
    alpha: float = 0.5
    seed: int = 0
    engine: str = "inprocess"
    device: str = "cpu"
    public_only: bool = False
    extractor_epochs: int = 1
    generator_steps: int | None = None
    eval_samples: int | None = None
    probe_epochs: int | None = None
    evaluator_epochs: int = 3
    public_records: int = 0  # 0: all 70k public images (for Φ and the public-only reference)
    data_path: str = ""
    inception_weights: str = ""
    randomness: str = "secure"
    dataset_ledger: str = ""
    dataset_budget_epsilon: float | None = None
    cache_dir: str = field(default_factory=lambda: str(Path.home() / ".cache" / "sstq-fl" / "mepf"))

    def __post_init__(self) -> None:
        check_dp_target(self.epsilon, self.delta, MAX_EPSILON)
        if self.profile not in ("cpu", "full"):
            raise ValueError(f"profile must be 'cpu' or 'full', got {self.profile!r}")
        if self.clients < 1:
            raise ValueError(f"clients must be >= 1, got {self.clients}")
        rng.check_mode(self.randomness)
        if self.dataset_budget_epsilon is not None and not self.dataset_budget_epsilon > 0:
            raise ValueError(f"dataset budget epsilon must be positive, got {self.dataset_budget_epsilon}")
        self._check_choices_and_sizes()

    def _check_choices_and_sizes(self) -> None:
        """The remaining argument checks, so that a bad value is refused before anything runs or is written."""
        choices = {"partition": ("iid", "dirichlet"), "engine": ("inprocess", "flower"), "moments": ((1,), (1, 2))}
        for name, allowed in choices.items():
            value = getattr(self, name)
            if (tuple(value) if isinstance(value, list) else value) not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device must be cpu or cuda[:N], got {self.device!r}")
        if not self.alpha > 0:
            raise ValueError(f"alpha must be positive, got {self.alpha}")
        least = {"records": 0, "public_records": 0, "generator_steps": 1, "eval_samples": 10, "probe_epochs": 1,
                 "evaluator_epochs": 1, "extractor_epochs": 1}
        for name, low in least.items():
            value = getattr(self, name)
            if value is not None and not value >= low:
                raise ValueError(f"{name.replace('_', '-')} must be at least {low}, got {value}")

    def resolved(self, name: str) -> int:
        cpu = self.profile == "cpu"
        defaults = {"records": 2000 if cpu else 0, "generator_steps": 500 if cpu else 20_000,
                    "eval_samples": 1000 if cpu else 10_000, "probe_epochs": 2 if cpu else 10}
        value = getattr(self, name)
        return int(defaults[name] if value is None else value)


# ----------------------------------------------------------------------------- public side
def public_extractor(cfg: MepfConfig, public_x: np.ndarray, public_y: np.ndarray) -> Any:
    """Φ trained on public data only, cached under ``cache_dir`` by (profile, seed, epochs, size)."""
    from .mepf import load_extractor, save_extractor, train_feature_extractor

    path = Path(cfg.cache_dir) / f"phi-{cfg.profile}-s{cfg.seed}-e{cfg.extractor_epochs}-n{len(public_y)}.pt"
    if path.exists() and Path(f"{path}.json").exists():
        return load_extractor(path, cfg.device)
    t0 = time.perf_counter()
    fx = train_feature_extractor(public_x, public_y, cfg.profile, cfg.extractor_epochs, cfg.seed, cfg.device)
    log.info("trained the public feature extractor (%s, D=%d) in %.1f s", cfg.profile, fx.dim, time.perf_counter() - t0)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_extractor(fx, path)
    return fx


def calibrate_sigma(cfg: MepfConfig) -> float:
    """Smallest σ whose single ``GaussianEvent(σ)`` is ``(ε, δ)``-DP under replace-one (the ledger's PLD).

    It starts from the exact σ of the continuous Gaussian mechanism (dp-accounting's analytic
    ``GaussianPrivacyLoss.from_privacy_guarantee``, neighbours 2 apart): the ledger's pessimistic
    PLD never needs less noise and, measured, accepts that σ itself, so one ledger evaluation
    replaces a bisection (which took 21 s at ε = 10 and 88 s at ε = 100; now about 1 s and 9 s).
    Where the ledger asks for more than 0.3 % more noise, :func:`calibrate_noise_multiplier`
    bisects as before.
    """
    from dp_accounting.pld import common
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

    if not cfg.epsilon <= MAX_EPSILON:
        raise ValueError(f"epsilon must be at most {MAX_EPSILON:g} to calibrate, got {cfg.epsilon}")
    exact = GaussianPrivacyLoss.from_privacy_guarantee(common.DifferentialPrivacyParameters(cfg.epsilon, cfg.delta),
                                                       sensitivity=1, adjacency_type=AdjacencyType.REPLACE)
    sigma = float(exact.standard_deviation)
    for _ in range(3):
        if _ledger_epsilon(sigma, cfg.delta) <= cfg.epsilon:
            return sigma
        sigma *= 1.001
    return calibrate_noise_multiplier(cfg.epsilon, cfg.delta, lambda s: [(GaussianEvent(s), 1)], RELATION)


def _ledger_epsilon(sigma: float, delta: float) -> float:
    """ε at ``delta`` of one ``GaussianEvent(sigma)`` on a fresh replace-one ledger (``inf``: too large to account)."""
    from ..privacy.errors import AccountingLimitError
    from ..privacy.ledger import PrivacyLedger

    led = PrivacyLedger(RELATION)
    try:
        led.record(GaussianEvent(sigma))
        return led.epsilon(delta)
    except AccountingLimitError:
        return math.inf


# ----------------------------------------------------------------------------- the release
def release_statistics(cfg: MepfConfig, data: WorkloadData, fx: Any, sigma: float | None
                       ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The one labelled release on the clients (in-process or on Flower), with its ledger."""
    from .mepf import contribution_bound, extractor_fingerprint, replace_one_sensitivity
    from .tasks import extractor_payload

    payload = extractor_payload(fx)
    config: dict[str, Any] = {"profile": cfg.profile, "moments": ",".join(map(str, cfg.moments)), "device": cfg.device}
    bound, delta_2 = contribution_bound(cfg.moments, labelled=True), replace_one_sensitivity(cfg.moments)

    def pipeline(pool: ClientPool) -> dict[str, Any]:
        run = DPRunner(pool, PIPELINE, RELATION, seed=cfg.seed, randomness=cfg.randomness)
        run.charge_public("feature-extractor", f"Φ trained on public Fashion-MNIST; sha256 {extractor_fingerprint(fx)}")
        if cfg.public_only:  # the zero-information reference touches no private record
            return {"release": {}, "runner": run, "dropped": []}
        if sigma is None:
            rel = run.non_private_sum("labelled-release", "mepf.class_sums", payload, config, bound)
        else:
            rel = run.additive_release("labelled-release", "mepf.class_sums", payload, config, bound, sigma,
                                       sensitivity=delta_2)
        return {"release": rel, "runner": run, "dropped": list(pool.dropped)}

    out = run_workload(pipeline, data, "inprocess" if cfg.public_only else cfg.engine, cfg.device)
    std = None if sigma is None or cfg.public_only else sigma * delta_2 / 2
    return out["release"], {"runner": out["runner"], "dropped": out["dropped"], "bound": bound, "sensitivity": delta_2,
                            "noise_std": std}


def release_plan(cfg: MepfConfig, sigma: float | None) -> list[tuple[PrivacyEvent, int]]:
    """The private events a run will charge: none (public-only), one non-private release (ε = ∞) or one
    ``GaussianEvent(σ)``; declared to the data set's ledger before any private record is read."""
    if cfg.public_only:
        return []
    if sigma is None:
        return [(NonPrivateEvent("non-private reference: sums released without noise"), 1)]
    return [(GaussianEvent(sigma), 1)]


def dataset_ledger(cfg: MepfConfig, data: WorkloadData, sigma: float | None) -> DatasetLedger:
    """The private data set's ledger, after checking the plan against ``cfg.dataset_budget_epsilon`` (raises
    ``BudgetExceededError``, a ValueError, before any private computation)."""
    book = DatasetLedger(data.digest, cfg.dataset_ledger or None)
    plan = release_plan(cfg, sigma)
    if plan:
        book.check_plan(plan, RELATION, cfg.delta, cfg.dataset_budget_epsilon)
    else:
        book.read()  # a malformed ledger is refused even by a run that spends nothing
    return book


def public_statistics(fx: Any, public_x: np.ndarray, public_y: np.ndarray, moments: tuple[int, ...]
                      ) -> dict[str, np.ndarray]:
    """Class statistics of public Fashion-MNIST (the zero-information reference's target)."""
    from .mepf import embedded_class_sums

    counts, sums = embedded_class_sums(fx, public_x, public_y, moments)
    return {"counts": counts.cpu().numpy(), "sums": sums.cpu().numpy()}


# ----------------------------------------------------------------------------- the run
def _generator_config(cfg: MepfConfig) -> Any:
    from .mepf import GeneratorConfig

    steps = cfg.resolved("generator_steps")
    if cfg.profile == "cpu":
        return GeneratorConfig.cpu(steps=steps)
    return GeneratorConfig.full("mnist", steps=steps, lr=1e-4, m_avg_lr=1e-3)


def _train_generator(cfg: MepfConfig, fx: Any, means: Any, probs: Any) -> tuple[Any, list[float]]:
    """The generator, trained on the released means alone, with a progress bar (log lines off a terminal)."""
    from .mepf import train_generator

    gcfg = _generator_config(cfg)
    with progress(gcfg.steps, f"{PIPELINE} generator steps") as bar:
        return train_generator(fx, means, probs, cfg.moments, gcfg, cfg.seed, cfg.device,
                               on_step=lambda step, loss: bar.update(step, matching_loss=loss))


def _grid_detail(cfg: MepfConfig) -> str:
    """What the sample grid's title says beside ε: the run's kind, δ, records, clients and randomness."""
    kind = _reference(cfg).split(" (")[0]
    return (f"{'DP' if kind == 'dp' else kind}, δ {cfg.delta:g}, {cfg.resolved('records') or 'all'} records, "
            f"{cfg.clients} clients, {cfg.profile} profile, randomness {cfg.randomness}")


def _evaluate(cfg: MepfConfig, data: WorkloadData, gen: Any, split: Any, out: Path) -> dict[str, Any]:
    from .evaluation import inception_fid
    from .mepf import sample

    x, y = sample(gen, cfg.resolved("eval_samples"), seed=cfg.seed + 1, device=cfg.device)
    res = evaluate_samples(x, y, data, split, out, SampleGrid(PIPELINE, 0.0 if cfg.public_only else cfg.epsilon,
                                                              _grid_detail(cfg)),
                           cfg.resolved("probe_epochs"), cfg.evaluator_epochs, cfg.cache_dir, cfg.seed)
    if cfg.inception_weights:
        res["inception_fid"] = inception_fid(cfg.inception_weights, split.test_x, x)
    return res


@dataclass(frozen=True)
class SampleGrid:
    """What a sample grid's title says produced it: the pipeline, its ε and a detail line."""

    pipeline: str
    epsilon: float
    detail: str


def evaluate_samples(x: torch.Tensor, y: torch.Tensor, data: WorkloadData, split: Any, out: Path, grid: SampleGrid,
                     probe_epochs: int, evaluator_epochs: int, cache_dir: str, seed: int) -> dict[str, Any]:
    """The DP generative pipelines' offline evaluation (§1.4) of labelled samples ``(x, y)``: the sample grid
    (``out/samples.png``), the LeNet-5 probe's accuracy on real ``priv_test``, domain-FD against a class-balanced
    real subset of the same size, the membership audit, and ``sample_label_agreement``: the share of samples that
    the evaluator CNN (trained on real ``priv_train``) assigns to the class they were drawn for (0.1 is chance)."""
    from .evaluation import domain_fd, downstream_accuracy, save_sample_grid, train_evaluator

    save_sample_grid(x, y, out / "samples.png", pipeline=grid.pipeline, epsilon=grid.epsilon, detail=grid.detail)
    acc = downstream_accuracy(x, y, split.test_x, split.test_y, epochs=probe_epochs, seed=seed)
    ev = train_evaluator(split.train_x, split.train_y, epochs=evaluator_epochs, seed=0,
                         cache_path=Path(cache_dir) / "evaluator-mnist.pt")
    real = balanced_subset(split.test_y, len(y), seed)
    m = len(real)
    fd = domain_fd(ev, split.test_x[real], split.test_y[real], x[:m], y[:m])
    _, pred = ev.features_and_predictions(x, "samples")
    return {"downstream_accuracy": acc, "domain_fd": fd["domain_fd"], "domain_fd_detail": fd,
            "sample_label_agreement": float(np.mean(pred == np.asarray(y))),
            "membership_audit": membership_audit(data, ev, x, split)}


def balanced_subset(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Indices of a class-balanced, seeded subset of at most ``n`` records: ``k = min(⌊n/K⌋, smallest class)``
    of each of the ``K`` classes present (``priv_test`` is sorted by class, so a prefix is not a sample)."""
    from .evaluation import balanced_indices

    counts = np.bincount(np.asarray(labels))
    present = counts[counts > 0]
    k = min(n // len(present), int(present.min()))
    if k < 1:
        raise ValueError(f"cannot draw a class-balanced subset of {n} records from {len(present)} classes")
    return balanced_indices(labels, k * len(present), seed)


def membership_audit(data: WorkloadData, ev: Any, samples: torch.Tensor, split: Any, n: int = 1000) -> dict[str, Any]:
    """Black-box membership inference (spec §1.4.4a): score each record by its distance to the nearest
    synthetic sample in the evaluator's feature space (closer = "member"); AUC over up to ``n`` records
    released by the clients against up to ``n`` from ``priv_test``, both class-balanced (so the class mix
    cannot tell them apart).  ≈ 0.5 means no detectable leakage (an attack only ever gives a lower bound)."""
    from .evaluation import membership_auc

    xs, ys = zip(*(data.client_records(c) for c in range(data.clients)))
    mx, my = np.concatenate(xs), np.concatenate(ys)
    members = mx[balanced_subset(my, n, data.seed)]
    nonmembers = split.test_x[balanced_subset(split.test_y, n, data.seed)]
    fs = torch.as_tensor(ev.features_and_predictions(samples)[0])

    def score(x: np.ndarray) -> np.ndarray:
        return torch.cdist(torch.as_tensor(ev.features_and_predictions(x)[0]), fs).min(dim=1).values.numpy()

    return {"auc": membership_auc(score(members), score(nonmembers)), "members": len(members),
            "nonmembers": len(nonmembers), "score": "distance to the nearest synthetic sample (evaluator features)"}


def prepare_out(out: Path, force: bool = False) -> bool:
    """Make ``out`` ready for one run; whether this call created it.

    A folder that already holds a run's files (:data:`RUN_FILES`) is refused (one line) unless
    ``force``, which removes them first (:func:`sstq_fl.io.clear_out`)."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} exists and is not a folder")
    clear_out([out / n for n in RUN_FILES if (out / n).exists()], out, force,
              "choose another folder, or --force to replace them")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    return created


def run_dp_mepf(cfg: MepfConfig, out: str | Path, force: bool = False) -> dict[str, Any]:
    """Run DP-MEPF and write ``metrics.json``, ``samples.png`` and ``transcript.jsonl`` to ``out``.

    ``out`` must not hold another run's files unless ``force`` (:func:`prepare_out`); a folder this
    call created is removed again if the run fails before writing anything into it."""
    return run_in(out, force, lambda folder: _run(cfg, folder))


def run_in(out: str | Path, force: bool, run: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``run(out)`` in a folder :func:`prepare_out` prepared; a folder this call created is removed again if
    the run fails before writing anything into it (every DP pipeline's entry point)."""
    out = Path(out)
    created = prepare_out(out, force)
    try:
        return run(out)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def _run(cfg: MepfConfig, out: Path) -> dict[str, Any]:
    """The run itself, into the folder :func:`run_dp_mepf` prepared."""
    from .data import load_private_split, load_public_fmnist
    from .mepf import class_means

    t0 = time.perf_counter()
    deterministic_kernels(cfg.device, cfg.randomness)
    public_x, public_y = load_public_fmnist()
    if cfg.public_records:
        public_x, public_y = public_x[:cfg.public_records], public_y[:cfg.public_records]
    split = load_private_split(cfg.data_path or None)
    data = WorkloadData("mnist-subset", cfg.clients, cfg.partition, cfg.alpha, cfg.seed, cfg.resolved("records"),
                        cfg.data_path)
    clock = PhaseClock(PIPELINE)
    fx = clock("public_extractor", lambda: public_extractor(cfg, public_x, public_y))
    sigma = clock("calibration", lambda: None if math.isinf(cfg.epsilon) or cfg.public_only else calibrate_sigma(cfg))
    book = dataset_ledger(cfg, data, sigma)  # refuses here, before the release, when over the data set's budget
    rel, info = clock("release", lambda: release_statistics(cfg, data, fx, sigma))
    privacy = info["runner"].finish(out, cfg.delta, book)  # transcript and data-set ledger before any output
    stats = public_statistics(fx, public_x, public_y, cfg.moments) if cfg.public_only else rel
    means, probs = class_means(stats["counts"], stats["sums"])
    gen, losses = clock("generator", lambda: _train_generator(cfg, fx, means, probs))
    evals = clock("evaluation", lambda: _evaluate(cfg, data, gen, split, out))
    metrics = {**privacy, "downstream_accuracy": evals["downstream_accuracy"], "domain_fd": evals["domain_fd"],
               "domain_fd_note": "domain-FD, not comparable to Inception FID", "records": data.n_decl,
               "clients": cfg.clients, "wall_s": time.perf_counter() - t0, "timings_s": clock.seconds, "sigma": sigma,
               "noise_std": info["noise_std"], "sensitivity": info["sensitivity"], "contribution_bound": info["bound"],
               "reference": _reference(cfg), "generator_loss_first_last":
               [float(np.mean(losses[:20])), float(np.mean(losses[-20:]))], "dropped": info["dropped"],
               "evaluation": {k: v for k, v in evals.items() if k not in ("downstream_accuracy", "domain_fd")},
               "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()}, "meta": run_meta()}
    atomic_write_json(out / "metrics.json", metrics)
    return metrics


def _reference(cfg: MepfConfig) -> str:
    if cfg.public_only:
        return "public-only (zero information: generator trained on public Fashion-MNIST statistics)"
    if math.isinf(cfg.epsilon):
        return "non-private (epsilon = inf: the release carries no noise)"
    return "dp"

