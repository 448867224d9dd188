"""DP-MEPF end to end (Harder, Jalali Asadabadi, Sutherland & Park, "Pre-trained Perceptual Features Improve
Differentially Private Image Generation", TMLR 2023), with a labelled release on simulated clients.

1. Φ, a feature extractor trained **non-privately on public Fashion-MNIST**, fixed before any
   private data is touched (its fingerprint goes into the transcript).
2. One labelled release on the simulated clients: each client sends the counts and per-class
   sums of its records' unit-normalised moments ``(e_y, φ₁⊗e_y[, φ₂⊗e_y])`` (per-record norm
   ``b = √(1+m)``, clipped on the client); the server adds ``N(0, (σΔ/2)² I)`` once, where
   ``Δ = max(√(2(1+m)), 2√m)`` is the release's replace-one sensitivity
   (:func:`~sstq_fl.gen.mepf.features.replace_one_sensitivity`; tighter than ``2b``).  The paper releases
   unlabelled mean embeddings; the labelled release and its sensitivity are our own construction.  Under
   ``REPLACE_ONE`` this is ``GaussianEvent(σ)`` with σ calibrated on the ledger to ``(ε, δ)``;
   the run is also appended to the private data set's ledger
   (:mod:`sstq_fl.privacy.dataset_ledger`), which can refuse it before any private record is
   read when the data set's cumulative ε would exceed ``dataset_budget_epsilon``.
   Under ``--trust secagg`` the same sums go through secure aggregation instead: each client sends a share of a
   secure sum (its sums, quantized with error-conditioned rounding, plus its own discrete Gaussian noise share,
   mod ``2^32``) and the server decodes only their sum (:meth:`~sstq_fl.gen.runner.DPRunner.secure_release`).  One
   ``DistributedDiscreteGaussianEvent``, its local noise calibrated on the ledger (by RDP) to the same
   ``(ε, δ)`` under replace-one (:func:`calibrate_secure`); no client needs to trust the server.
3. Post-processing only: ``μ̃_y = S̃_y / max(ñ_y, 1)`` (never raw counts) and a generator
   trained for a fixed number of steps to match ``μ̃`` (no early stopping on private data).
4. Offline evaluation (:func:`~sstq_fl.gen.outputs.evaluate_samples`): LeNet-5 probe accuracy on the real
   ``priv_test`` split and the domain-FD (not comparable to Inception FID) against a class-balanced real subset,
   a sample grid, the replayable transcript.

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...config.generative import MAX_EPSILON
from ...config.mepf import MepfConfig
from ...data.mnist import public_records
from ...privacy.calibration import calibrate_noise_multiplier
from ...privacy.events import GaussianEvent, NonPrivateEvent, PrivacyEvent
from ...progress import progress
from ...secagg.records import RecordSecAgg
from ..outputs import SampleGrid, common_metrics, dataset_text, eps_text, evaluate_samples
from ..runner import NONPRIVATE_SUMS, DPRunner
from ..template import Declared, RunContext, RunPlan, Steps, run_pipeline

if TYPE_CHECKING:
    from ...data.workload import WorkloadData

log = logging.getLogger("sstq_fl.gen")
PIPELINE = MepfConfig.WORKLOAD
RELATION = "replace_one"



# ----------------------------------------------------------------------------- public side
def public_extractor(cfg: MepfConfig, public_x: np.ndarray, public_y: np.ndarray) -> Any:
    """Φ trained on public data only, cached under ``cache_dir`` by (profile, seed, epochs, size)."""
    from .features import load_extractor, save_extractor, train_feature_extractor

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

    It starts from the exact σ of the continuous Gaussian mechanism (the analytic Gaussian mechanism of
    Balle & Wang, ICML 2018, as dp-accounting's ``GaussianPrivacyLoss.from_privacy_guarantee``, neighbours 2
    apart): the ledger's pessimistic PLD never needs less noise and usually accepts that σ itself, so one
    ledger evaluation replaces a bisection.  Where the ledger asks for more than 0.3 % more noise,
    :func:`calibrate_noise_multiplier` bisects.
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
    from ...privacy.errors import AccountingLimitError
    from ...privacy.ledger import PrivacyLedger

    led = PrivacyLedger(RELATION)
    try:
        led.record(GaussianEvent(sigma))
        return led.epsilon(delta)
    except AccountingLimitError:
        return math.inf


def release_shapes(fx: Any, moments: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """The public shapes of the labelled release: ``counts [K]`` and ``sums [K, m·D]``."""
    return {"counts": (fx.num_classes,), "sums": (fx.num_classes, len(moments) * fx.dim)}


def calibrate_secure(cfg: MepfConfig, fx: Any, data: Declared) -> RecordSecAgg:
    """The release under ``--trust secagg``: the labelled sums (flattened, public shapes) through secure aggregation
    with the replace-one shift ``Δ`` of the trusted release (:func:`~.features.replace_one_sensitivity`), the
    aggregate bound ``N_decl·b``, every client's share guaranteed in the sum (the simulation's clients all take
    part; a missing share refuses the release), and the local noise the least whose one
    ``DistributedDiscreteGaussianEvent`` the ledger certifies ``(ε, δ)`` under replace-one (by RDP)."""
    from ...secagg.records import SumSpec, calibrate_releases, flat_dim
    from .features import contribution_bound, replace_one_sensitivity

    if not cfg.epsilon <= MAX_EPSILON:
        raise ValueError(f"epsilon must be at most {MAX_EPSILON:g} to calibrate, got {cfg.epsilon}")
    spec = SumSpec(flat_dim(release_shapes(fx, cfg.moments)), replace_one_sensitivity(cfg.moments),
                   data.n_decl * contribution_bound(cfg.moments, labelled=True))
    return calibrate_releases(cfg.epsilon, cfg.delta, RELATION, [spec], data.clients)[0]


# ----------------------------------------------------------------------------- the release
def release(run: DPRunner, cfg: MepfConfig, fx: Any, sigma: float | None, secure: RecordSecAgg | None = None
            ) -> dict[str, np.ndarray]:
    """The one labelled release on the clients, charged to ``run``'s ledger: through the trusted aggregator
    (``sigma``; ``None``: without noise), or through secure aggregation (``secure``); nothing for the public-only
    reference, which touches no private record."""
    from .client_tasks import extractor_payload
    from .features import contribution_bound, extractor_fingerprint, replace_one_sensitivity

    run.charge_public("feature-extractor", f"Φ trained on public Fashion-MNIST; sha256 {extractor_fingerprint(fx)}")
    if cfg.public_only:
        return {}
    payload = extractor_payload(fx)
    config: dict[str, Any] = {"profile": cfg.profile, "moments": ",".join(map(str, cfg.moments)), "device": cfg.device}
    bound, delta_2 = contribution_bound(cfg.moments, labelled=True), replace_one_sensitivity(cfg.moments)
    if secure is not None:
        return run.secure_release("labelled-release", "mepf.class_sums", payload, config, bound, secure,
                                  release_shapes(fx, cfg.moments))
    if sigma is None:
        return run.non_private_sum("labelled-release", "mepf.class_sums", payload, config, bound)
    return run.additive_release("labelled-release", "mepf.class_sums", payload, config, bound, sigma,
                                sensitivity=delta_2)


def noise_std(cfg: MepfConfig, sigma: float | None, secure: RecordSecAgg | None = None) -> float | None:
    """The std of the release's noise on the sums: ``σΔ/2``, the secure release's central std, or ``None``
    (no noise, or no release)."""
    from .features import replace_one_sensitivity

    if cfg.public_only:
        return None
    if secure is not None:
        return secure.central_stddev()
    return None if sigma is None else sigma * replace_one_sensitivity(cfg.moments) / 2


def release_plan(cfg: MepfConfig, sigma: float | None, secure: RecordSecAgg | None = None
                 ) -> list[tuple[PrivacyEvent, int]]:
    """The private events a run will charge: none (public-only), one non-private release (ε = ∞), one
    ``GaussianEvent(σ)`` or, under secure aggregation, its ``DistributedDiscreteGaussianEvent``; declared to the data
    set's ledger before any private record is read."""
    if cfg.public_only:
        return []
    if secure is not None:
        return [(secure.event(), 1)]
    if sigma is None:
        return [(NonPrivateEvent(NONPRIVATE_SUMS), 1)]
    return [(GaussianEvent(sigma), 1)]


def public_statistics(fx: Any, public_x: np.ndarray, public_y: np.ndarray, moments: tuple[int, ...]
                      ) -> dict[str, np.ndarray]:
    """Class statistics of public Fashion-MNIST (the zero-information reference's target)."""
    from .features import embedded_class_sums

    counts, sums = embedded_class_sums(fx, public_x, public_y, moments)
    return {"counts": counts.cpu().numpy(), "sums": sums.cpu().numpy()}


# ----------------------------------------------------------------------------- the run
def _generator_config(cfg: MepfConfig) -> Any:
    from .generator import GeneratorConfig

    steps = cfg.resolved("generator_steps")
    if cfg.profile == "cpu":
        return GeneratorConfig.cpu(steps=steps)
    return GeneratorConfig.full("mnist", steps=steps, lr=1e-4, m_avg_lr=1e-3)


def _train_generator(cfg: MepfConfig, fx: Any, means: Any, probs: Any) -> tuple[Any, list[float]]:
    """The generator, trained on the released means alone, with a progress bar (log lines off a terminal)."""
    from .generator import train_generator

    gcfg = _generator_config(cfg)
    with progress(gcfg.steps, f"{PIPELINE} generator steps") as bar:
        return train_generator(fx, means, probs, cfg.moments, gcfg, cfg.seed, cfg.device,
                               on_step=lambda step, loss: bar.update(step, matching_loss=loss))


def grid_detail(cfg: MepfConfig) -> str:
    """What the sample grid's title says beside ε: the run's kind, δ, records, clients and randomness."""
    kind = cfg.reference_label().split(" (")[0]
    return f"{'DP' if kind == 'dp' else kind}, {cfg.describe()}"


def _evaluate(cfg: MepfConfig, data: WorkloadData, gen: Any, split: Any, out: Path) -> dict[str, Any]:
    from ..evaluation import inception_fid
    from .generator import sample

    x, y = sample(gen, cfg.resolved("eval_samples"), seed=cfg.seed + 1, device=cfg.device)
    res = evaluate_samples(x, y, data, split, out, SampleGrid(PIPELINE, 0.0 if cfg.public_only else cfg.epsilon,
                                                              grid_detail(cfg)),
                           cfg)
    if cfg.inception_weights:
        res["inception_fid"] = inception_fid(cfg.inception_weights, split.test_x, x)
    return res


@dataclass(frozen=True)
class Calibrated:
    """DP-MEPF's plan: the public images, Φ, and the release's ``σ`` or secure aggregation."""

    public_x: np.ndarray
    public_y: np.ndarray
    fx: Any
    sigma: float | None
    secure: RecordSecAgg | None


class MepfSteps(Steps[MepfConfig, Calibrated, dict[str, np.ndarray]]):
    """DP-MEPF in the template's order (:func:`~sstq_fl.gen.template.run_pipeline`)."""

    pipeline, relation = PIPELINE, RELATION

    def plan(self, ctx: RunContext[MepfConfig]) -> RunPlan[Calibrated]:
        """Φ on public data and the release's calibration; the public-only reference stays in-process."""
        cfg, clock = ctx.cfg, ctx.clock
        public_x, public_y = public_records(cfg.public_records or 0, "first")
        fx = clock("public_extractor", lambda: public_extractor(cfg, public_x, public_y))
        secure, sigma = None, None
        if cfg.trust == "secagg" and not cfg.public_only:
            secure = clock("calibration", lambda: calibrate_secure(cfg, fx, ctx.declared))
        else:
            sigma = clock("calibration", lambda: None if math.isinf(cfg.epsilon) or cfg.public_only else calibrate_sigma(cfg))
        return RunPlan(release_plan(cfg, sigma, secure), Calibrated(public_x, public_y, fx, sigma, secure), declare=False,
                       engine="inprocess" if cfg.public_only else None)

    def compute(self, ctx: RunContext[MepfConfig], plan: RunPlan[Calibrated]) -> dict[str, np.ndarray]:
        s = plan.state
        return ctx.clock("release", lambda: ctx.private.clients(lambda run: release(run, ctx.cfg, s.fx, s.sigma,
                                                                                     s.secure)))

    def outputs(self, ctx: RunContext[MepfConfig], plan: RunPlan[Calibrated], rel: dict[str, np.ndarray],
                privacy: dict[str, Any]) -> dict[str, Any]:
        """The generator on the released means (or the public statistics), its evaluation and the metrics."""
        from .features import class_means, contribution_bound, replace_one_sensitivity

        cfg, clock, s, private = ctx.cfg, ctx.clock, plan.state, ctx.private
        stats = public_statistics(s.fx, s.public_x, s.public_y, cfg.moments) if cfg.public_only else rel
        means, probs = class_means(stats["counts"], stats["sums"])
        gen, losses = clock("generator", lambda: _train_generator(cfg, s.fx, means, probs))
        evals = clock("evaluation", lambda: _evaluate(cfg, private.data, gen, private.split, ctx.folder))
        delta_2 = replace_one_sensitivity(cfg.moments)
        return {**common_metrics(cfg, private.data, privacy, evals, private.dropped,
                                 top=("downstream_accuracy", "domain_fd")),
                "sigma": s.sigma if s.secure is None else 2 * s.secure.central_stddev() / delta_2,
                "trust": cfg.trust, "secagg": s.secure.notes() if s.secure is not None else None,
                "noise_std": noise_std(cfg, s.sigma, s.secure), "sensitivity": delta_2,
                "contribution_bound": contribution_bound(cfg.moments, labelled=True),
                "generator_loss_first_last": [float(np.mean(losses[:20])), float(np.mean(losses[-20:]))]}


def run_dp_mepf(cfg: MepfConfig, out: str | Path, force: bool = False) -> dict[str, Any]:
    """Run DP-MEPF and write ``metrics.json``, ``samples.png`` and ``transcript.jsonl`` to ``out``
    (:func:`~sstq_fl.gen.template.run_pipeline`)."""
    return run_pipeline(MepfSteps(), cfg, out, force)


def summary(m: dict[str, Any]) -> str:
    """What ``sstq-fl gen dp-mepf`` prints about a run: ε, accuracy, domain-FD, size and time; the data set's ledger."""
    eps = eps_text(m["epsilon"])
    return (f"dp-mepf ({m['reference']}): epsilon {eps} at delta {m['delta']:g} ({m['relation']}, randomness "
            f"{m['randomness']}), downstream accuracy {m['downstream_accuracy']:.4f}, domain-FD {m['domain_fd']:.4g} "
            f"(not comparable to Inception FID), {m['records']} records on {m['clients']} clients, {m['wall_s']:.1f} s\n"
            f"{dataset_text(m)}")
