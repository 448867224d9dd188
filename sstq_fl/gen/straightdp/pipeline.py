"""StraightDP end to end on simulated clients: a DP moment release, the analytic
flow field of the released Gaussian mixture, and DP-SGD flow matching, on one ``ADD_OR_REMOVE_ONE`` ledger.

Flow convention (flow matching, Lipman et al., ICLR 2023, on the straight path of rectified flow, Liu, Gong & Liu,
ICLR 2023): ``x_t = (1−t)ξ + t·z`` with **t = 0 the noise
end**, target ``v = z − ξ``, Euler sampling from 0 to 1 with classifier-free guidance (Ho & Salimans, 2021)
``v_u + 1.5(v_c − v_u)``.
Pixels are scaled to [−1, 1] (our choice: ``z = 2x − 1``) everywhere StraightDP computes (features, moments,
field, flow), and samples are mapped back to [0, 1] for the evaluation.

0. **Public side** (:mod:`~sstq_fl.gen.straightdp.public`; every calibration constant from public data only): the PCA
   basis ``P`` (``p`` rows)
   and mean ``m_pub`` of public Fashion-MNIST, the feature bound ``R_f`` (a public norm quantile), ``τ`` (the
   knee of the time-weighted cosine between the public analytic and empirical fields) and ``t₀`` (the public
   plateau edge); the flow model (:mod:`~sstq_fl.gen.straightdp.flow`) pretrained on public Fashion-MNIST with
   byte captions "class y".  All recorded as public-data steps.
1. **Stage 1, the moment release**: two :meth:`~sstq_fl.gen.runner.DPRunner.additive_release`s on the
   clients (:mod:`~sstq_fl.gen.straightdp.client_tasks`): whitened counts and per-class sums (add/remove Δ = √5/2,
   noise ``σ₁·√5/2``) and the average-form second moment over ``N_decl`` (noise ``σ₁·R_f²/N_decl``); the server
   post-processes them, in a fixed order, into a Gaussian mixture (:func:`~.moments.postprocess`).
2. **Ports**: *guidance* (the ``moments+sgd`` default) starts sampling at ``t₀`` from the released Gaussian's
   marginal, after DP-SGD at ``max(t₀, τ)`` (:func:`guidance_time`); *distillation* trains the model on the
   analytic field for ``t ∈ [0, τ]`` on the server with an equal public replay batch on ``[τ, 1]``.
3. **Stage 2, DP-SGD** (Abadi et al., CCS 2016): :meth:`~sstq_fl.gen.runner.DPRunner.dpsgd_round`s of the shared
   ``dpsgd.clipped_sum`` on the model ``"straightdp-flow"``: Poisson sampling at ``q`` by each client, the
   per-example flow-matching loss averaged over the noise multiplicity **before** the one clip, ``t ~ U[τ, 1]``
   when moments are used (no private gradient at ``t < τ``), noise once, normalisation by ``q·N_decl``; AdamW and
   an EMA on the server.  Optionally THA (:mod:`~.calibration`).
4. **Evaluation** (:func:`~sstq_fl.gen.outputs.evaluate_samples`).

**Space** (``space``): ``pixel`` (above), or ``latent``: every stage on the ``d = 32`` latents of a frozen
convolutional autoencoder trained on public Fashion-MNIST (:mod:`~sstq_fl.gen.straightdp.autoencoder`; latent
diffusion, Rombach et al., CVPR 2022): the clients encode their own records with the broadcast encoder, the
feature is ``f = clip_R(z)`` (``P = I``, no centering, ``R`` the public latents' norm quantile), the moments,
field, ports and DP-SGD flow matching run on the 32-d latents (the flow on 16 tokens of ``2 × 4 × 4``), ``τ`` and
``t₀`` come from the public latents, and samples are decoded by the frozen decoder.

Methods: ``sgd`` (uniform DP-SGD, all of ε, ``t ~ U[0, 1]``); ``moments`` (all of ε to Stage 1;
samples ``z ~ N(μ_y, Σ)``, or with ``port="guidance"`` the *public prior + guidance* row); ``moments+sgd`` with
``port`` ``distill`` (default) or ``guidance``.  ``epsilon=inf`` is the non-private reference (the same releases
and rounds without noise, recorded as non-private).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...config.straightdp import StraightConfig
from ...data.mnist import public_records
from ...privacy.calibration import plan_epsilon
from ...privacy.events import NonPrivateEvent, PublicDataEvent
from ...progress import progress
from ...secagg.records import RecordSecAgg
from ..outputs import SampleGrid, common_metrics, dataset_text, eps_text, evaluate_samples
from ..runner import NONPRIVATE_SUMS, DPRunner
from ..template import RunContext, RunPlan, Steps, run_pipeline
from . import privacy_plan as cal
from .public import FLOOR, PIPELINE, PublicCalibration, pretrained_flow, public_calibration, public_grad_norms

log = logging.getLogger("sstq_fl.gen")
RELATION = cal.RELATION
CFG_SCALE = 1.5  # classifier-free guidance v_u + 1.5(v_c − v_u)
BETAS = (0.0, 0.25, 0.5, 0.75, 1.0)
THA_BUCKETS = 4


# ----------------------------------------------------------------------------- budget and plan
@dataclass(frozen=True)
class Setup:
    """The calibrated budget and the declared plan (nothing private read but the declared size)."""

    q: float
    sigma_moments: float | None
    sigma_sgd: float | None
    tha: cal.ThaPlan | None
    plan: list[tuple[Any, int]]
    epsilon_moments: float | None
    secure: tuple[RecordSecAgg, RecordSecAgg] | None = None  # --trust secagg: (class moments, second moment)


def moments_budget(cfg: StraightConfig) -> float:
    """Stage 1's ε: all of it for ``moments``, the share 0.235ε for ``moments+sgd`` (:data:`~.calibration.MOMENT_SHARE`)."""
    return cfg.epsilon if cfg.method == "moments" else cal.MOMENT_SHARE * cfg.epsilon


def calibrate(cfg: StraightConfig, n_decl: int, pub: PublicCalibration, model: Any) -> Setup:
    """σ₁ for Stage 1 alone at its share, then the DP-SGD σ (or THA's shared std) on the joint PLD; at ``ε = ∞``
    the same plan without noise (non-private events)."""
    q = cfg.resolved("q")
    steps = cfg.resolved("sgd_steps") if cfg.uses_sgd else 0
    if not cfg.private:
        plan = [(NonPrivateEvent(NONPRIVATE_SUMS), n) for n in (cal.MOMENT_RELEASES * cfg.uses_moments, steps) if n]
        tha = tha_setup(cfg, pub, model, [], q, steps) if cfg.tha else None
        return Setup(q, None, None, tha, plan, None)
    eps_m = moments_budget(cfg) if cfg.uses_moments else None
    if cfg.trust == "secagg":  # the config admits it for --method moments only (no DP-SGD to compose)
        secure = calibrate_secure(cfg, n_decl, pub)
        return Setup(q, None, None, None, [(r.event(), 1) for r in secure], eps_m, secure)
    sigma1 = cal.calibrate_moments(eps_m, cfg.delta) if eps_m is not None else None
    prefix = cal.moment_plan(sigma1) if sigma1 is not None else []
    if not cfg.uses_sgd:
        return Setup(q, sigma1, None, None, prefix, eps_m)
    if cfg.tha:
        tha = tha_setup(cfg, pub, model, prefix, q, steps)
        return Setup(q, sigma1, None, tha, [*prefix, *tha.events(q)], eps_m)
    sigma = cal.calibrate_joint(cfg.epsilon, cfg.delta, prefix, q, steps)
    return Setup(q, sigma1, sigma, None, [*prefix, *cal.sgd_plan(q, [(sigma, steps)])], eps_m)


def moment_shapes(classes: int, p: int) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """The public shapes of the two moment releases: ``counts [Y]``, ``sums_w [Y, p]``; ``m2 [p, p]``."""
    return {"counts": (classes,), "sums_w": (classes, p)}, {"m2": (p, p)}


def calibrate_secure(cfg: StraightConfig, n_decl: int, pub: PublicCalibration) -> tuple[RecordSecAgg, RecordSecAgg]:
    """The two moment releases under ``--trust secagg``: their add/remove shifts (``√5/2``, ``R_f²``) and aggregate
    bounds (``N_decl`` times those), every client's share guaranteed in each sum (a missing share refuses the
    release), and one common noise multiplier, the least whose two ``DistributedDiscreteGaussianEvent`` the ledger
    certifies ``(ε, δ)`` under add/remove (by RDP)."""
    from ...secagg.records import SumSpec, calibrate_releases, flat_dim
    from .moments import CLASS_MOMENTS_SHIFT, second_moment_shift

    first, second = moment_shapes(10, int(pub.basis.shape[0]))
    b1, b2 = CLASS_MOMENTS_SHIFT, second_moment_shift(pub.r_f)
    specs = [SumSpec(flat_dim(first), b1, n_decl * b1), SumSpec(flat_dim(second), b2, n_decl * b2)]
    a, b = calibrate_releases(cfg.epsilon, cfg.delta, RELATION, specs, cfg.clients)
    return a, b


def full_plan(setup: Setup) -> list[tuple[Any, int]]:
    """The run's declared plan: the private events plus the public-data steps (calibration, pretraining,
    distillation or guidance, sampling)."""
    return [*setup.plan, (PublicDataEvent(), PUBLIC_STEPS)]


PUBLIC_STEPS = 3  # public calibration, public pretraining, server post-processing (field, distillation, sampling)


def tha_setup(cfg: StraightConfig, pub: PublicCalibration, model: Any, prefix: list[tuple[Any, int]], q: float,
              steps: int) -> cal.ThaPlan:
    """THA's plan: buckets on ``[τ, 1]`` (``[0, 1]`` without moments), ``γ`` = the public median per-sample gradient
    norm, and ``β`` (given, or the public proxy's choice among :data:`BETAS`): the plan maximising the mean over
    buckets of ``E[min(‖g‖, C_k)]/s`` on public gradients, the clipped signal per unit of the shared noise std.
    ``β = 0`` (uniform) is among the candidates, so the choice is never worse than uniform on the proxy.  At
    ``ε = ∞`` the same buckets and clips (β given, else 0) without noise (``s = 0``)."""
    edges = cal.bucket_edges(pub.tau if cfg.uses_moments else 0.0, THA_BUCKETS)
    norms = public_grad_norms(model, cfg, pub, edges)
    gamma = float(np.median(np.concatenate(norms)))
    if not cfg.private:
        beta = cfg.beta or 0.0
        clips = cal.clip_profile(pub.field.posterior_variance_trace, edges, beta, cfg.clip, gamma)
        return cal.ThaPlan(tuple(map(float, edges)), tuple(cal.bucket_steps(steps, THA_BUCKETS)),
                           tuple(map(float, clips)), 0.0, beta)
    best: tuple[float, cal.ThaPlan] | None = None
    for beta in (BETAS if cfg.beta is None else (cfg.beta,)):
        clips = cal.clip_profile(pub.field.posterior_variance_trace, edges, beta, cfg.clip, gamma)
        plan = cal.tha_plan(cfg.epsilon, cfg.delta, prefix, q, steps, edges, clips, beta)
        score = float(np.mean([np.minimum(n, c).mean() for n, c in zip(norms, clips, strict=True)])) / plan.noise_std
        log.info("%s: THA beta %.2f: clips %s, noise std %.4g, public proxy %.4g", PIPELINE, beta,
                 np.round(clips, 4).tolist(), plan.noise_std, score)
        if best is None or score > best[0]:
            best = (score, plan)
    assert best is not None
    return best[1]


# ----------------------------------------------------------------------------- Stage 1
def release_moments(run: DPRunner, cfg: StraightConfig, setup: Setup, pub: PublicCalibration) -> tuple[Any, dict]:
    """The two Gaussian releases on the clients at their exact add/remove sensitivities (``√5/2`` for the whitened
    counts and sums, ``R_f²`` for the second moment, averaged over ``N_decl``: :mod:`.moments`), post-processed on
    the server into the released mixture."""
    from .moments import CLASS_MOMENTS_SHIFT, MomentRelease, postprocess, second_moment_shift

    payload = {"P": pub.basis, "m_pub": pub.mean, **pub.encoder_payload}
    conf: dict[str, Any] = {"r_f": pub.r_f, "classes": 10}
    b1, b2 = CLASS_MOMENTS_SHIFT, second_moment_shift(pub.r_f)
    if setup.secure is not None:
        first, second = moment_shapes(10, int(pub.basis.shape[0]))
        u = run.secure_release("stage1-class-moments", "straightdp.class_moments", payload, conf, b1, setup.secure[0],
                               first)
        m2 = run.secure_release("stage1-second-moment", "straightdp.second_moment", payload, conf, b2,
                                setup.secure[1], second, normalize=True)
        release = MomentRelease(counts=u["counts"], sums_w=u["sums_w"], m2=m2["m2"],
                                count_std=setup.secure[0].central_stddev(), r_f=pub.r_f)
        return postprocess(release, pub.basis, pub.mean, cfg.resolved("rank"), FLOOR)
    if setup.sigma_moments is None:
        u = run.non_private_sum("stage1-class-moments", "straightdp.class_moments", payload, conf, b1)
        m2 = {k: v / run.n_decl for k, v in
              run.non_private_sum("stage1-second-moment", "straightdp.second_moment", payload, conf, b2).items()}
    else:
        u = run.additive_release("stage1-class-moments", "straightdp.class_moments", payload, conf, b1,
                                 setup.sigma_moments)
        m2 = run.additive_release("stage1-second-moment", "straightdp.second_moment", payload, conf, b2,
                                  setup.sigma_moments, normalize=True)
    std = 0.0 if setup.sigma_moments is None else b1 * setup.sigma_moments
    release = MomentRelease(counts=u["counts"], sums_w=u["sums_w"], m2=m2["m2"], count_std=std, r_f=pub.r_f)
    return postprocess(release, pub.basis, pub.mean, cfg.resolved("rank"), FLOOR)


# ----------------------------------------------------------------------------- port 1: distillation
def _fm_pair(z: torch.Tensor, t: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x_t, ξ)`` with ``x_t = (1−t)ξ + t·z`` (t = 0 the noise end)."""
    xi = torch.randn(z.shape, generator=gen, dtype=z.dtype).to(z.device)
    tt = t.view(-1, *([1] * (z.ndim - 1)))
    return (1 - tt) * xi + tt * z, xi


def _null(labels: torch.Tensor, p: float, gen: torch.Generator, null: int) -> torch.Tensor:
    drop = torch.rand(labels.shape[0], generator=gen).to(labels.device) < p
    return labels.masked_fill(drop, null)


def distill_batch(model: Any, analytic: Any, mixture: Any, pub: PublicCalibration, n: int, gen: torch.Generator,
                  np_rng: np.random.Generator) -> torch.Tensor:
    """One distillation loss (port 1; the inputs and the replay mix are our choices): ``t ~ U[0, τ]``, ``y ~ π̃``,
    ``z ~ N(μ_y, Σ)``, ``x = (1−t)ξ + tz``, target the analytic field (the null branch for a null caption, p = 0.1), plus an
    equal public flow-matching replay batch on ``[τ, 1]`` with targets ``z − ξ``."""
    dev = next(model.parameters()).device
    null = model.cfg.null_label
    y = torch.as_tensor(np_rng.choice(len(mixture.pi), size=n, p=mixture.pi))
    z = torch.as_tensor(mixture.sample(y.numpy(), np_rng), dtype=torch.float32).to(dev)
    t = (torch.rand(n, generator=gen) * pub.tau).to(dev)
    x, _ = _fm_pair(z, t, gen)
    labels = _null(y, model.cfg.p_uncond, gen, null).to(dev)
    target = analytic.velocity(x, t, labels)
    shape = model.cfg.shape
    own = model.velocity(x.view(n, *shape), t, labels).reshape(n, -1)
    idx = torch.as_tensor(np_rng.integers(0, len(pub.replay_y), size=n))
    zp = model.record_to_model(torch.as_tensor(pub.replay_x[idx], device=dev)).reshape(n, -1)
    tp = (pub.tau + (1 - pub.tau) * torch.rand(n, generator=gen)).to(dev)
    xp, xi = _fm_pair(zp, tp, gen)
    lp = _null(torch.as_tensor(pub.replay_y[idx]), model.cfg.p_uncond, gen, null).to(dev)
    replay = model.velocity(xp.view(n, *shape), tp, lp).reshape(n, -1)
    return ((own - target.to(own.dtype)) ** 2).mean() + ((replay - (zp - xi)) ** 2).mean()


def distill(model: Any, mixture: Any, pub: PublicCalibration, cfg: StraightConfig) -> Any:
    """Port 1 on the server: ``distill_steps`` AdamW (lr 10⁻⁴) steps of :func:`distill_batch` on the released
    mixture's field (post-processing of the release), then the model in eval mode."""
    from .field import AnalyticField

    released = AnalyticField(mixture)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen, np_rng = torch.Generator().manual_seed(cfg.seed + 5), np.random.default_rng(cfg.seed + 5)
    steps = cfg.resolved("distill_steps")
    with progress(steps, f"{PIPELINE} distillation") as bar:
        for step in range(1, steps + 1):
            loss = distill_batch(model, released, mixture, pub, cfg.resolved("distill_batch"), gen, np_rng)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            bar.update(step, loss=float(loss.detach()))
    return model.eval()


# ----------------------------------------------------------------------------- Stage 2: DP-SGD
def sgd_round_plan(cfg: StraightConfig, setup: Setup, pub: PublicCalibration, step: int
                   ) -> tuple[float, float, float, float | None]:
    """Round ``step``'s ``(t_min, t_max, clip, σ)``: ``t ~ U[τ, 1]`` with moments (``U[0, 1]`` for uniform DP-SGD),
    or the THA bucket's range, clip and ``σ_k = s/C_k``; ``σ = None`` at ``ε = ∞``."""
    lo = pub.tau if cfg.uses_moments else 0.0
    if setup.tha is None:
        return lo, 1.0, cfg.clip, setup.sigma_sgd
    k = setup.tha.bucket_of(step)
    sigma = setup.tha.multipliers[k] if cfg.private else None
    return setup.tha.edges[k], setup.tha.edges[k + 1], setup.tha.clips[k], sigma


def _sgd_step(run: DPRunner, cfg: StraightConfig, model: Any, setup: Setup, pub: PublicCalibration, step: int
              ) -> dict[str, np.ndarray]:
    """One round's released gradient: ``(Σ clipped sums + N(0, σ²C²I))/(q·N_decl)`` (or without noise at ε = ∞)."""
    t_min, t_max, clip, sigma = sgd_round_plan(cfg, setup, pub, step)
    state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    conf: dict[str, Any] = {"model": "straightdp-flow", "profile": cfg.profile, "low_b0": cfg.low_b0,
                            "multiplicity": cfg.resolved("multiplicity"), "t_min": t_min, "t_max": t_max,
                            "device": cfg.device, "space": cfg.space}
    tasks = "straightdp.latent_" if cfg.space == "latent" else "dpsgd."  # latent: the clients encode, then the same
    state = {**state, **pub.encoder_payload}
    if sigma is not None:
        return run.dpsgd_round("stage2-dpsgd", tasks + "clipped_sum", state, conf, setup.q, clip, sigma)
    sums = run.non_private_sum("stage2-dpsgd", tasks + "sampled_clipped_sum", state,
                               {**conf, "q": setup.q, "clip": clip, "step": step}, clip)
    return {k: v / (setup.q * run.n_decl) for k, v in sums.items()}


def private_sgd(run: DPRunner, cfg: StraightConfig, model: Any, setup: Setup, pub: PublicCalibration) -> Any:
    """Stage 2: ``sgd_steps`` rounds on the clients, AdamW on the released gradients and an EMA on the server;
    returns the EMA model (eval mode)."""
    import copy

    from .training import ema_update

    model.train()
    ema = copy.deepcopy(model).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.resolved("sgd_lr"))
    steps = cfg.resolved("sgd_steps")
    with progress(steps, f"{PIPELINE} DP-SGD rounds") as bar:
        for step in range(1, steps + 1):
            grads = _sgd_step(run, cfg, model, setup, pub, step)
            for k, p in model.named_parameters():
                p.grad = torch.as_tensor(grads[k], dtype=p.dtype, device=p.device)
            opt.step()
            ema_update(ema, model, cfg.resolved("ema"))
            bar.update(step)
    return ema


# ----------------------------------------------------------------------------- the run
def _notes(cfg: StraightConfig) -> dict[str, str]:
    return {"method": cfg.method, "port": cfg.resolved_port, "tha": str(cfg.tha), "low_b0": str(cfg.low_b0),
            "space": cfg.space,
            "labels": "class counts and sums released with noise (Stage 1); DP-SGD on (image, label) records"}


def _calibration_note(pub: PublicCalibration) -> str:
    if pub.space == "latent":
        return (f"frozen conv autoencoder (sha256 {pub.autoencoder_sha256}), R, tau and t0 from public "
                "Fashion-MNIST latents")
    return "PCA basis, public mean, R_f, tau and t0 from public Fashion-MNIST"


def on_clients(run: DPRunner, cfg: StraightConfig, setup: Setup, pub: PublicCalibration, model: Any) -> dict[str, Any]:
    """Stage 1 and Stage 2 on the clients, charged to ``run``'s ledger (started with the plan), distillation on the
    server between them."""
    run.ledger.notes.update(_notes(cfg))
    run.charge_public("public-calibration", _calibration_note(pub))
    run.charge_public("public-pretraining", f"flow model pretrained on public Fashion-MNIST {pub.space}s with byte "
                                            "captions")
    mixture, diag = release_moments(run, cfg, setup, pub) if cfg.uses_moments else (None, {})
    net = model
    if cfg.resolved_port == "distill":
        net = distill(net, mixture, pub, cfg)
    if cfg.uses_sgd:
        net = private_sgd(run, cfg, net, setup, pub)
    run.charge_public("server-post-processing", "analytic field, distillation, guidance and sampling use "
                                                "only released statistics, released gradients and public data")
    return {"mixture": mixture, "moments_diagnostics": diag, "model": net}


@torch.no_grad()
def generate(cfg: StraightConfig, model: Any, mixture: Any, pub: PublicCalibration, n: int
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` class-balanced samples (labels ``i mod 10``): ``z ~ N(μ_y, Σ)`` for moments only; with guidance,
    ``x_{t₀} ~ N(t₀μ_y, t₀²Σ + (1−t₀)²I)`` integrated by the model from ``t₀`` to 1; else Euler from ``t = 0``.
    Images in [0, 1] (latent space: decoded by the frozen public decoder)."""
    from .field import guidance_start
    from .training import sample

    y = torch.arange(n) % 10
    gen = torch.Generator().manual_seed(cfg.seed + 3)
    if not cfg.uses_flow:
        z = mixture.sample(y.numpy(), np.random.default_rng(cfg.seed + 3))
        return pub.to_images(z).clamp(0, 1), y
    steps = cfg.resolved("euler_steps")
    if cfg.resolved_port == "guidance":
        t0 = guidance_time(cfg, pub)
        x0 = guidance_start(mixture, t0, y, gen).float().view(n, *model.cfg.shape)
        x = sample(model, y, steps, CFG_SCALE, gen, t0=t0, x0=x0)
    else:
        x = sample(model, y, steps, CFG_SCALE, gen)
    return pub.to_images(x.cpu()).clamp(0, 1), y


def guidance_time(cfg: StraightConfig, pub: PublicCalibration) -> float:
    """Where guidance hands the released Gaussian over to the model: a given ``--t0``; else, after DP-SGD (whose
    private gradients all have ``t ≥ τ``), ``max(t₀, τ)``, so the model only integrates times it was trained on
    privately; else (the public prior) the public plateau edge ``t₀``.  Before ``τ`` the start point is the exact
    marginal of the released mixture, ``N(tμ_y, t²Σ + (1−t)²I)``, i.e. the closed-form field integrated exactly."""
    if cfg.t0 is not None or not cfg.uses_sgd:
        return float(pub.t0)
    return float(max(pub.t0, pub.tau))


@dataclass(frozen=True)
class Public:
    """StraightDP's plan: the public calibration, the pretrained flow (``None`` without one) and the setup."""

    pub: PublicCalibration
    model: Any
    setup: Setup


class StraightSteps(Steps[StraightConfig, Public, dict[str, Any]]):
    """StraightDP in the template's order (:func:`~sstq_fl.gen.template.run_pipeline`)."""

    pipeline, relation = PIPELINE, RELATION

    def plan(self, ctx: RunContext[StraightConfig]) -> RunPlan[Public]:
        """Public calibration and pretraining on ``public_records`` images drawn by the seed, then the budget."""
        cfg, clock = ctx.cfg, ctx.clock
        public_x, public_y = public_records(cfg.resolved("public_records"), "seeded", cfg.seed)
        pub = clock("public_calibration", lambda: public_calibration(cfg, public_x, public_y))
        model = clock("public_pretraining", lambda: pretrained_flow(cfg, pub.replay_x, pub.replay_y)) \
            if cfg.uses_flow else None
        setup = clock("calibration", lambda: calibrate(cfg, ctx.declared.n_decl, pub, model))
        return RunPlan(full_plan(setup), Public(pub, model, setup))

    def compute(self, ctx: RunContext[StraightConfig], plan: RunPlan[Public]) -> dict[str, Any]:
        p = plan.state
        return ctx.clock("clients", lambda: ctx.private.clients(lambda run: on_clients(run, ctx.cfg, p.setup, p.pub,
                                                                                        p.model)))

    def outputs(self, ctx: RunContext[StraightConfig], plan: RunPlan[Public], res: dict[str, Any],
                privacy: dict[str, Any]) -> dict[str, Any]:
        """Samples, their evaluation on ``priv_test`` and the metrics."""
        cfg, clock, p, private = ctx.cfg, ctx.clock, plan.state, ctx.private
        x, y = clock("sampling", lambda: generate(cfg, res["model"], res["mixture"], p.pub, cfg.resolved("eval_samples")))
        grid = SampleGrid(PIPELINE, cfg.epsilon, grid_detail(cfg))
        evals = clock("evaluation", lambda: evaluate_samples(x, y, private.data, private.split, ctx.folder, grid, cfg))
        return {**common_metrics(cfg, private.data, privacy, evals, private.dropped), **_metrics(cfg, p.setup, p.pub, res)}


def run_straightdp(cfg: StraightConfig, out: str | Path, force: bool = False) -> dict[str, Any]:
    """Run StraightDP and write ``metrics.json``, ``samples.png`` and ``transcript.jsonl`` to ``out``
    (:func:`~sstq_fl.gen.template.run_pipeline`); returns the metrics as written (an infinite value is ``None``)."""
    return run_pipeline(StraightSteps(), cfg, out, force)


def secure_epsilon(setup: Setup, delta: float) -> float | None:
    """The ledger's ε of the secure moment releases (``None`` without them)."""
    from ...secagg.records import plan_epsilon as secure_plan_epsilon

    return None if setup.secure is None else secure_plan_epsilon(setup.secure, delta, RELATION)


def grid_detail(cfg: StraightConfig) -> str:
    """What the sample grid's title says beside ε: the row (method, port, THA, backbone), its kind, the relation
    and the shared detail."""
    kind = "DP" if cfg.private else "not DP"
    return (f"{cfg.method}, port {cfg.resolved_port}{', THA' if cfg.tha else ''}{', low-B0' if cfg.low_b0 else ''}"
            f"{', latent' if cfg.space == 'latent' else ''}, "
            f"{kind}, add/remove, {cfg.describe()}")


def _metrics(cfg: StraightConfig, setup: Setup, pub: PublicCalibration, res: dict[str, Any]) -> dict[str, Any]:
    """StraightDP's own ``metrics.json`` fields: the method, port, the stages' budgets and noise, τ and t₀."""
    tha = asdict(setup.tha) if setup.tha is not None else None
    return {"method": cfg.method, "port": cfg.resolved_port, "tha": tha, "low_b0": cfg.low_b0, "space": cfg.space,
            "autoencoder_sha256": pub.autoencoder_sha256,
            "epsilon_moments": setup.epsilon_moments,
            "epsilon_moments_certified": plan_epsilon(cal.moment_plan(setup.sigma_moments), cfg.delta, RELATION)
            if setup.sigma_moments is not None else secure_epsilon(setup, cfg.delta),
            "sigma_moments": setup.sigma_moments, "trust": cfg.trust,
            "secagg": [r.notes() for r in setup.secure] if setup.secure is not None else None,
            "sigma_sgd": setup.sigma_sgd, "q": setup.q, "clip": cfg.clip, "tau": pub.tau, "t0": pub.t0,
            "guidance_t0": guidance_time(cfg, pub) if cfg.resolved_port == "guidance" else None,
            "r_f": pub.r_f, "pca_dim": int(pub.basis.shape[0]), "rank": cfg.resolved("rank"),
            "sgd_steps": cfg.resolved("sgd_steps") if cfg.uses_sgd else 0, "tau_curve": pub.tau_curve,
            "moments_diagnostics": res["moments_diagnostics"]}


def summary(m: dict[str, Any]) -> str:
    """What ``sstq-fl gen straightdp`` prints about a run: ε, the noise of both stages, τ, accuracy, domain-FD; the
    data set's ledger."""
    eps = eps_text(m["epsilon"])
    return (f"straightdp {m['method']} (port {m['port']}, {m.get('space', 'pixel')} space, {m['reference']}): "
            f"epsilon {eps} at delta {m['delta']:g} "
            f"({m['relation']}, randomness {m['randomness']}), sigma moments {m['sigma_moments']}, sigma sgd "
            f"{m['sigma_sgd']}, tau {m['tau']:.3g}\n"
            f"downstream accuracy {m['downstream_accuracy']:.4f}, label agreement {m['sample_label_agreement']:.3f}, "
            f"domain-FD {m['domain_fd']:.4g} (not comparable to Inception FID), {m['records']} records on "
            f"{m['clients']} clients, {m['wall_s']:.1f} s\n{dataset_text(m)}")
