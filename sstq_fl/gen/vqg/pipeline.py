"""DP-VQG end to end on simulated clients: a differentially private vector-quantised generator made of a VQ-VAE
tokenizer, exponential-mechanism tokens and a MaskGIT prior.

The whole pipeline is accounted on one ``REPLACE_ONE`` ledger (the record-local exponential mechanism needs a
fixed number of records, so DP-SGD is accounted under replace-one too), its plan declared
before any private record is read, and appended to the private data set's ledger
(:mod:`sstq_fl.privacy.dataset_ledger`).

1. **Stage I, the tokenizer Θ = (E, G, C)** (van den Oord, Vinyals & Kavukcuoglu, NeurIPS 2017, with L2-normalised
   tokens and codes, R = 1, GroupNorm, stochastic top-k, per-example entropy, explicit codebook gradients):

   * **FP-VQG**: DP-SGD rounds on the clients (Abadi et al., CCS 2016) through
     :meth:`~sstq_fl.gen.runner.DPRunner.dpsgd_round` (model ``"vqg-tokenizer"``): each client
     Poisson-samples its records at ``q = B/N_decl``, clips per-example gradients to ``C = 1`` and sends the
     sum; the server forms ``g̃ = (Σ sums + N(0, σ²C²I))/(q·N_decl)`` and takes one Adam step (lr 10⁻³).
     ``σ`` is calibrated on the ledger so that ``steps × PoissonSampled(q, Gaussian(σ))`` is
     ``(ε₁, δ)``-DP with ``ε₁ = 0.8ε`` (the 4 : 1 split).
   * **PP-VQG**: trained without noise on public Fashion-MNIST on the server
     (:func:`~sstq_fl.gen.vqg.tokenizer.train_public_tokenizer`), recorded as a public-data computation;
     ``ε₁ = 0``.

2. **Stage II, the tokens**: client task ``vqg.tokens`` (:mod:`sstq_fl.gen.vqg.client_tasks`) through
   :meth:`~sstq_fl.gen.runner.DPRunner.record_local_release`: per location the exponential mechanism
   ``P(k) ∝ exp(ε₀·u_l(k)/(2Δu))``, ``Δu = 4R² = 4``, over all ``K`` codes, and the label by ``k``-ary RR at
   ``ε_y = 0.25·ε₂`` (our choice; or declared public); the server shuffles the rows.  Charged per record as
   ``HW × ExponentialMechanism(ε₀)`` **with its count** plus ``PureDp(ε_y)`` (parallel composition over
   records).  Mode A: the declared split ``ε₀ = (ε₂ − ε_y)/HW`` (``(ε, δ)`` by basic composition), then ``ε₀`` and
   ``ε_y`` scaled by one factor ``s ≥ 1`` until the **joint** ledger (Stage I's events first) certifies ``ε`` at
   ``δ`` (:func:`~sstq_fl.gen.vqg.mechanism.fill_mode_a`: the PLD composes more tightly than the sum, which left
   budget unspent).  Mode B: ``ε_y`` kept, ``ε₀`` bisected on the joint ledger
   (:func:`~sstq_fl.gen.vqg.mechanism.eps0_mode_b`).

   **The negative result.**  The EM's logits span ``[−ε₀/2, 0]`` whatever ``R`` is, so even the best case (nearest
   code at distance 0, all others at ``2R``) gives the nearest code ``P = e^{ε₀/2}/(e^{ε₀/2} + K − 1)``: at
   ``K = 1024``, ``HW = 49`` and ``ε = 10``, Stage II's ``ε₀`` is 0.03–0.24 and ``P`` 0.00099–0.00110 against
   ``1/K = 0.00098``.  A 50 % hit needs ``ε₀ = 2 ln(K − 1) = 13.86`` per location, a record-level ε of
   ``49 × 13.86 = 679`` (basic composition and PLD at ``δ = 10⁻⁵`` alike;
   :func:`~sstq_fl.gen.vqg.mechanism.feasibility`).  The DP-VQG paper's numbers draw each location at the whole
   ``ε₂`` (no composition over the ``HW`` locations: honestly ``HW·ε₂``) with ``Δu = 4`` while ``R ≠ 1`` (the
   logit range becomes ``ε₂R²/2``, the honest per-location ε ``ε₂R²``); neither is done here.

   **``stage2="dpsgd-prior"``** (:mod:`~sstq_fl.gen.vqg.prior_dpsgd`) replaces the EM: the clients tokenize their
   own records (argmin, never sent) and the class-conditional prior is trained by DP-SGD rounds on them,
   ``prior_steps × PoissonSampled(q, Gaussian(σ))`` with ``σ`` calibrated on the joint ledger.

3. **Stage III, the prior** (Chang, Zhang, Jiang, Liu & Freeman, "MaskGIT", CVPR 2022): trained on the released (shuffled)
   rows only, sampled class-conditionally with classifier-free guidance, decoded by Θ's decoder
   (post-processing).

4. **Evaluation** (:func:`~sstq_fl.gen.outputs.evaluate_samples`): LeNet-5 probe accuracy on real ``priv_test``, domain-FD (not
   comparable to Inception FID), a membership audit, a sample grid (one row per class).

Diagnostics: EM peakedness, i.e. the mean probability of the nearest code and the token entropy in
bits, is computed **on public Fashion-MNIST** (a proxy pushed through the same Θ and the same EM at the
run's ``ε₀``), so no statistic of the private records is published beside the ledger's; its best case (nearest
code at distance 0, all others at 2R: ``1/(1+(K−1)e^{−ε₀/2})``) and the honest record-level ε of the run's
``ε₀`` in both modes are reported too.  The EM's logit range is ``ε₀/2``, so at moderate budgets the tokens are
near-uniform; that is reported as measured, never "fixed".

References: ``epsilon=inf`` is the non-private reference (FP: the same rounds without noise; argmin tokens
and true labels; the ledger says ε = ∞); ``reference="argmin"`` keeps Stage I as at ``ε`` (DP-SGD at 0.8ε
for FP) but releases argmin tokens and true labels in Stage II: **not DP** (ε = ∞), the "what a free Stage
II would give" reference.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...config.vqg import VqgConfig
from ...data.mnist import public_records
from ...privacy.calibration import calibrate_noise_multiplier, plan_epsilon
from ...privacy.events import GaussianEvent, NonPrivateEvent, PoissonSampledEvent, PrivacyEvent, PublicDataEvent
from ...progress import PhaseClock, progress
from ..outputs import SampleGrid, common_metrics, dataset_text, eps_text, evaluate_samples
from ..runner import NONPRIVATE_SUMS, DPRunner
from ..template import RunContext, RunPlan, Steps, run_pipeline
from .mechanism import (
    NOT_DP,
    PUBLIC_LABELS_NOTE,
    RELATION,
    Stage2Budget,
    argmin_tokens,
    calibrate_stage2,
    em_logits,
    em_peakedness,
    em_probabilities,
    eps0_mode_b,
    fill_mode_a,
    ideal_argmin_probability,
    record_level_epsilon,
    split_budget,
)
from .prior_dpsgd import CLIP as PRIOR_CLIP
from .prior_dpsgd import calibrate_prior, prior_plan, public_prior, train_prior_dpsgd
from .tokenizer import HW, TokenizerConfig, VQTokenizer

if TYPE_CHECKING:
    from ...data.workload import WorkloadData

log = logging.getLogger("sstq_fl.gen")
PIPELINE = VqgConfig.WORKLOAD
Plan = list[tuple[PrivacyEvent, int]]
CLIP = 1.0  # C, the per-example clip of Stage I (our choice; the DP-VQG paper gives none)
LR = 1e-3  # Adam on the noisy gradient
NUM_CLASSES = 10
# ----------------------------------------------------------------------------- budget and plan
def sampling_rate(cfg: VqgConfig, n_decl: int) -> float:
    """``q = B/N_decl``: the expected batch over the declared size (never the realised one); a batch above the
    declared size is refused (``q`` would exceed 1)."""
    if cfg.resolved("batch") > n_decl:
        raise ValueError(f"--batch {cfg.resolved('batch')} is above the {n_decl} private records (the sampling rate "
                         "B/N would exceed 1)")
    return cfg.resolved("batch") / n_decl


def calibrate_stage1(cfg: VqgConfig, q: float) -> float | None:
    """FP-VQG's ``σ``: the smallest noise multiplier whose ``steps × PoissonSampled(q, Gaussian(σ))`` the ledger
    certifies ``(ε₁, δ)`` with ``ε₁ = 0.8ε`` (:func:`~sstq_fl.privacy.calibration.calibrate_noise_multiplier`,
    a bisection over the same PLD ledger).  ``None`` for PP-VQG (public Stage I) and for ``ε = ∞`` (no noise)."""
    if cfg.variant == "pp" or not math.isfinite(cfg.epsilon):
        return None
    steps = cfg.resolved("steps")
    eps1, _ = split_budget(cfg.epsilon, cfg.variant)
    return calibrate_noise_multiplier(eps1, cfg.delta, lambda s: [(PoissonSampledEvent(q, GaussianEvent(s)), steps)],
                                      RELATION)


def stage1_plan(cfg: VqgConfig, q: float, sigma: float | None) -> Plan:
    """Stage I's private events: FP ``steps × PoissonSampled(q, Gaussian(σ))`` (or ``steps`` non-private sums at
    ``ε = ∞``); none for PP (its public training is recorded as a public-data step)."""
    if cfg.variant == "pp":
        return []
    if sigma is None:
        return [(NonPrivateEvent(NONPRIVATE_SUMS), cfg.resolved("steps"))]
    return [(PoissonSampledEvent(q, GaussianEvent(sigma)), cfg.resolved("steps"))]


def stage2_budget(cfg: VqgConfig, prefix: Plan) -> Stage2Budget:
    """The calibrated Stage II budget (:func:`~sstq_fl.gen.vqg.mechanism.calibrate_stage2`).  Mode A: the declared
    split, then ``ε₀`` and ``ε_y`` scaled by one factor until the joint ledger (Stage I's events, ``prefix``, first)
    certifies ``ε`` at ``δ`` (:func:`~sstq_fl.gen.vqg.mechanism.fill_mode_a`).  FP in mode B: ``ε₀`` re-bisected
    so that Stage I's events plus ``HW × ε₀`` plus ``ε_y`` meet ``ε`` at ``δ`` on one ledger (if the joint ledger
    does not certify ε, ε₀ shrinks).  The argmin reference: ``ε₀ = ∞`` and true labels."""
    budget = calibrate_stage2(cfg.epsilon, cfg.delta, HW, cfg.variant, cfg.mode, cfg.labels)
    if cfg.reference == "argmin":
        return replace(budget, eps0=math.inf, eps_y=0.0 if cfg.labels == "public" else math.inf,
                       certified_epsilon=math.inf)
    if cfg.mode == "A":
        return fill_mode_a(budget, prefix)
    if cfg.variant == "fp" and cfg.mode == "B" and budget.private:
        eps0, _ = eps0_mode_b(cfg.epsilon, budget.eps_y, HW, cfg.delta, prefix=prefix)
        budget = replace(budget, eps0=eps0, certified_epsilon=record_level_epsilon(eps0, HW, budget.eps_y, cfg.delta,
                                                                                   "B"))
    return budget


def public_steps(cfg: VqgConfig) -> int:
    """Public-data steps recorded on the ledger: the PP tokenizer, the EM diagnostic on public data, the prior
    (stage2 em); the PP tokenizer (dpsgd-prior), and the public prior too (the public-only reference)."""
    if cfg.stage2 == "dpsgd-prior":
        return (cfg.variant == "pp") + (cfg.reference == "public")
    return 3 if cfg.variant == "pp" else 2


def run_plan(cfg: VqgConfig, s1: Plan, stage2: Plan) -> Plan:
    """The whole run's ``[(event, count)]``, declared on the run's ledger before any private record is read."""
    public = [(PublicDataEvent(), public_steps(cfg))] if public_steps(cfg) else []
    return [*s1, *public, *stage2]


def prior_sigma(cfg: VqgConfig, q: float, s1: Plan) -> float | None:
    """dpsgd-prior's ``σ``: calibrated so that the joint ledger (Stage I's events ``s1``, then the prior's rounds)
    certifies ``(ε, δ)``; ``None`` at ``ε = ∞`` (the same rounds without noise)."""
    if not math.isfinite(cfg.epsilon):
        return None
    return calibrate_prior(cfg.epsilon, cfg.delta, q, cfg.resolved("prior_steps"), s1)


# ----------------------------------------------------------------------------- Stage I
def tokenizer_config(cfg: VqgConfig) -> TokenizerConfig:
    """Θ's hyperparameters: the profile's (CPU: 16/32, d = 16, K = 64; full: 64/128, d = 32, K = 1024);
    PP-VQG keeps the batch entropy p̄ (allowed on public data), FP-VQG the per-example one."""
    return TokenizerConfig.profile(cfg.profile, per_example_entropy=cfg.variant == "fp")


def _apply(model: VQTokenizer, opt: torch.optim.Optimizer, grads: dict[str, np.ndarray]) -> None:
    """One Adam step on the released noisy gradient (post-processing of the round's release)."""
    for k, p in model.named_parameters():
        p.grad = torch.as_tensor(grads[k], dtype=p.dtype, device=p.device)
    opt.step()


def _round(run: DPRunner, cfg: VqgConfig, model: VQTokenizer, q: float, sigma: float | None, step: int
           ) -> dict[str, np.ndarray]:
    """One Stage I round: ``(Σ clipped sums + N(0, σ²C²I))/(q·N_decl)``; at ``ε = ∞`` the same sums without noise."""
    params = {k: v.detach().cpu().numpy() for k, v in model.named_parameters()}
    conf: dict[str, Any] = {"model": "vqg-tokenizer", "profile": cfg.profile, "device": cfg.device}
    if sigma is not None:
        return run.dpsgd_round("stage1-tokenizer", "dpsgd.clipped_sum", params, conf, q, CLIP, sigma)
    sums = run.non_private_sum("stage1-tokenizer", "dpsgd.sampled_clipped_sum", params,
                               {**conf, "q": q, "clip": CLIP, "step": step}, CLIP)
    return {k: v / (q * run.n_decl) for k, v in sums.items()}


def private_tokenizer(run: DPRunner, cfg: VqgConfig, q: float, sigma: float | None) -> VQTokenizer:
    """FP-VQG's Θ: ``steps`` rounds on the clients, Adam (lr 10⁻³) on the server; initialised from the seed
    (never from data: no k-means, no dead-code restarts)."""
    from .tokenizer import build_tokenizer

    model = build_tokenizer(tokenizer_config(cfg), cfg.seed).to(torch.device(cfg.device)).train()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    steps = cfg.resolved("steps")
    with progress(steps, f"{PIPELINE} tokenizer rounds") as bar:
        for step in range(1, steps + 1):
            _apply(model, opt, _round(run, cfg, model, q, sigma, step))
            bar.update(step)
    return model.eval()


def public_tokenizer(cfg: VqgConfig, public_x: np.ndarray) -> VQTokenizer:
    """PP-VQG's Θ: trained without noise on public Fashion-MNIST on the server (ε₁ = 0)."""
    from .tokenizer import train_public_tokenizer

    steps = cfg.resolved("steps")
    with progress(steps, f"{PIPELINE} public tokenizer steps") as bar:
        model, _ = train_public_tokenizer(torch.as_tensor(public_x), tokenizer_config(cfg), steps, cfg.resolved("batch"),
                                          cfg.seed, LR, cfg.device, lambda s, n, loss: bar.update(s, loss=loss))
    return model


# ----------------------------------------------------------------------------- Stage II
def release_tokens_on_clients(run: DPRunner, cfg: VqgConfig, model: VQTokenizer, budget: Stage2Budget
                              ) -> dict[str, np.ndarray]:
    """The record-local release: ``vqg.tokens`` on every client; ``HW × EM(ε₀)`` charged with its count ``HW``
    and the label's event (RR at ``ε_y``, or the public-labels note) beside it; the rows come back shuffled."""
    from .client_tasks import tokenizer_payload

    conf: dict[str, Any] = {"profile": cfg.profile, "device": cfg.device, "eps0": budget.eps0, "eps_y": budget.eps_y,
                            "labels": cfg.labels}
    (first, count), *rest = budget.plan()
    return run.record_local_release("stage2-tokens", "vqg.tokens", tokenizer_payload(model), conf, first,
                                    eps0=budget.eps0 if budget.private else None, count=count, also=rest)


def _labels_note(cfg: VqgConfig, budget: Stage2Budget | None) -> str:
    if cfg.reference == "public":
        return "no private label read (public Fashion-MNIST labels train the prior)"
    if budget is None:
        return "labels are part of each record: inside its clipped DP-SGD gradient (no separate release)"
    if cfg.labels == "public":
        return PUBLIC_LABELS_NOTE
    if budget.eps_y == math.inf:
        return "true labels released (not DP)"
    return f"labels privatized by 10-ary randomized response at eps_y = {budget.eps_y:.6g}"


def on_clients(run: DPRunner, cfg: VqgConfig, s: dict[str, Any], public_model: VQTokenizer | None) -> dict[str, Any]:
    """Stages I (FP) and II on the clients, charged to ``run``'s ledger (started with the plan): Θ, and the released
    rows (em) or the prior trained by DP-SGD rounds (dpsgd-prior; the public-only reference runs nothing on the
    clients)."""
    run.ledger.notes.update({"variant": cfg.variant, "mode": cfg.mode, "stage2": cfg.stage2,
                             "labels": _labels_note(cfg, s.get("budget"))})
    if public_model is not None:
        run.charge_public("stage1-tokenizer", "PP-VQG tokenizer trained without noise on public Fashion-MNIST")
    model = public_model or private_tokenizer(run, cfg, s["q"], s["sigma"])
    out: dict[str, Any] = {"tokenizer": model}
    if cfg.stage2 == "em":
        out["rows"] = release_tokens_on_clients(run, cfg, model, s["budget"])
    elif cfg.reference != "public":
        out["prior"] = train_prior_dpsgd(run, model, prior_config(cfg, model.cfg.codebook_size), cfg.profile,
                                         cfg.device, s["q_prior"], s["sigma_prior"], cfg.resolved("prior_steps"),
                                         cfg.seed + 2)
    return out


# ----------------------------------------------------------------------------- diagnostics
@torch.no_grad()
def em_diagnostics(model: VQTokenizer, eps0: float, public_x: np.ndarray, n: int, seed: int) -> dict[str, Any]:
    """EM peakedness at the run's ``ε₀`` on ``n`` public Fashion-MNIST images (a proxy: no private
    statistic): mean ``P(nearest code)`` and mean token entropy ``−Σ_k P log₂ P`` of the exact EM law, chunked."""
    codes = model.codes().double()
    k = codes.shape[0]
    if eps0 == math.inf:
        return {"em_nearest_code_prob": 1.0, "token_entropy_bits": 0.0, "source": NOT_DP, "uniform_probability": 1 / k}
    idx = np.random.default_rng(seed).permutation(len(public_x))[:n]
    sums, seen = np.zeros(2), 0
    for part in np.array_split(idx, max(1, math.ceil(len(idx) * HW * k / (1 << 22)))):
        z = model.encode_tokens(torch.as_tensor(public_x[part], device=codes.device)).double()
        pk = em_peakedness(em_probabilities(em_logits(z, codes, eps0, 1.0)), argmin_tokens(z, codes, 1.0))
        sums += len(part) * np.array([pk["argmin_probability"], pk["token_entropy_bits"]])
        seen += len(part)
    return {"em_nearest_code_prob": float(sums[0] / seen), "token_entropy_bits": float(sums[1] / seen),
            "source": f"{seen} public Fashion-MNIST images through the run's tokenizer and EM (no private statistic)",
            "uniform_probability": 1 / k, "uniform_entropy_bits": math.log2(k),
            "ideal_nearest_code_prob": ideal_argmin_probability(eps0, k)}


def record_level(budget: Stage2Budget, delta: float) -> dict[str, float]:
    """The honest record-level ε of Stage II at the run's ``ε₀``: pure basic composition ``HW·ε₀ + ε_y``
    (mode A's claim, δ = 0) and the PLD composition at ``δ`` (mode B's)."""
    return {"basic_pure": record_level_epsilon(budget.eps0, HW, budget.eps_y, delta, "A"),
            "pld_at_delta": record_level_epsilon(budget.eps0, HW, budget.eps_y, delta, "B")}


# ----------------------------------------------------------------------------- Stage III
def prior_config(cfg: VqgConfig, k: int) -> Any:
    """MaskGIT's hyperparameters: the profile's (CPU: 64/2/2, 3 epochs, S = 8; full: MaskGIT's 384/6/6),
    vocabulary ``K``,
    peak learning rate :attr:`VqgConfig.prior_peak_lr` (cosine decay to 5·10⁻⁶)."""
    from .maskgit import PriorConfig

    base = PriorConfig.cpu if cfg.profile == "cpu" else PriorConfig.full
    pcfg = base(vocab_size=k, epochs=cfg.resolved("prior_epochs"), lr=cfg.prior_peak_lr)
    if cfg.stage2 != "dpsgd-prior":
        return pcfg
    width = cfg.resolved("prior_width")  # dpsgd-prior: fewer parameters, less noise in norm
    if width % pcfg.heads:
        raise ValueError(f"prior-width must be a multiple of the profile's {pcfg.heads} heads, got {width}")
    return replace(pcfg, d_model=width)


def train_prior_on_release(cfg: VqgConfig, rows: dict[str, np.ndarray], k: int) -> tuple[Any, list[float]]:
    """The prior on the released rows only (post-processing), with a progress bar (log lines off a terminal)."""
    from .maskgit import train_prior

    pcfg = prior_config(cfg, k)
    total = pcfg.epochs * math.ceil(len(rows["labels"]) / pcfg.batch)
    with progress(total, f"{PIPELINE} prior steps") as bar:
        return train_prior(torch.as_tensor(rows["tokens"]), torch.as_tensor(rows["labels"]), pcfg,
                           torch.Generator().manual_seed(cfg.seed + 2),
                           lambda s, n, loss: bar.update(s, loss=loss), cfg.device)


@torch.no_grad()
def generate(cfg: VqgConfig, prior: Any, model: VQTokenizer, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` class-balanced samples: MaskGIT token maps for labels ``i mod 10``, decoded by Θ's decoder G."""
    from .maskgit import sample

    y = torch.arange(n) % NUM_CLASSES
    idx = sample(prior, y, prior.cfg, torch.Generator().manual_seed(cfg.seed + 3))
    dev = model.codebook.weight.device
    x = torch.cat([model.decode_indices(b.to(dev)).cpu() for b in idx.split(500)])
    return x.clamp(0, 1), y


# ----------------------------------------------------------------------------- evaluation
def grid_detail(cfg: VqgConfig) -> str:
    """What the sample grid's title says beside ε: the variant, its kind, mode and labels, and the shared detail."""
    kind = "not DP" if not cfg.private else "DP"
    return f"{cfg.variant.upper()}-VQG, {kind}, mode {cfg.mode}, labels {cfg.labels}, {cfg.describe()}"


def _evaluate(cfg: VqgConfig, data: WorkloadData, x: torch.Tensor, y: torch.Tensor, split: Any, out: Path
              ) -> dict[str, Any]:
    """The shared offline evaluation (:func:`~sstq_fl.gen.outputs.evaluate_samples`) of the samples."""
    return evaluate_samples(x, y, data, split, out, SampleGrid(PIPELINE, cfg.epsilon, grid_detail(cfg)),
                            cfg)


# ----------------------------------------------------------------------------- the run
def plan_run(cfg: VqgConfig, n_decl: int, clock: PhaseClock | None = None) -> dict[str, Any]:
    """Calibration and the plan from the declared size alone (nothing private is read): ``q``, ``σ`` and Stage I's
    events, then the Stage II budget (em) or the prior's ``q``, ``σ`` and events (dpsgd-prior), and the whole plan."""
    timed = clock or (lambda _name, fn: fn())
    q = sampling_rate(cfg, n_decl)
    sigma = timed("calibration_stage1", lambda: calibrate_stage1(cfg, q))
    s1 = stage1_plan(cfg, q, sigma)
    if cfg.stage2 == "dpsgd-prior":
        qp = min(1.0, cfg.resolved("prior_batch") / n_decl)
        sp = None if cfg.reference == "public" else timed("calibration_stage2", lambda: prior_sigma(cfg, qp, s1))
        s2 = [] if cfg.reference == "public" else prior_plan(qp, sp, cfg.resolved("prior_steps"))
        return {"q": q, "sigma": sigma, "stage1": s1, "q_prior": qp, "sigma_prior": sp, "stage2": s2,
                "plan": run_plan(cfg, s1, s2)}
    budget = timed("calibration_stage2", lambda: stage2_budget(cfg, s1))
    return {"q": q, "sigma": sigma, "stage1": s1, "budget": budget, "stage2": budget.plan(),
            "plan": run_plan(cfg, s1, budget.plan())}


@dataclass(frozen=True)
class Planned:
    """DP-VQG's plan: :func:`plan_run`'s calibration and events, and the public images."""

    s: dict[str, Any]
    public_x: np.ndarray
    public_y: np.ndarray


class VqgSteps(Steps[VqgConfig, Planned, dict[str, Any]]):
    """DP-VQG in the template's order (:func:`~sstq_fl.gen.template.run_pipeline`)."""

    pipeline, relation = PIPELINE, RELATION

    def plan(self, ctx: RunContext[VqgConfig]) -> RunPlan[Planned]:
        """The public images and the calibration from the declared size (:func:`plan_run`)."""
        cfg = ctx.cfg
        public_x, public_y = public_records(cfg.public_records or 0, "first")
        s = plan_run(cfg, ctx.declared.n_decl, ctx.clock)
        return RunPlan(s["plan"], Planned(s, public_x, public_y))

    def compute(self, ctx: RunContext[VqgConfig], plan: RunPlan[Planned]) -> dict[str, Any]:
        """The PP tokenizer on public data, the clients (:func:`on_clients`), then the prior (post-processing)."""
        cfg, clock, p = ctx.cfg, ctx.clock, plan.state
        pub = clock("public_tokenizer", lambda: public_tokenizer(cfg, p.public_x)) if cfg.variant == "pp" else None
        res = clock("clients", lambda: ctx.private.clients(lambda run: on_clients(run, cfg, p.s, pub)))
        run, model = ctx.private.runner, res["tokenizer"]
        if cfg.stage2 == "em":
            prior, fields = _em_prior(cfg, p.s, run, model, res["rows"], p.public_x, clock)
        else:
            prior, fields = _dpsgd_prior(cfg, p.s, run, model, res.get("prior"), p.public_x, p.public_y, clock)
        return {"prior": prior, "tokenizer": model, "fields": fields}

    def outputs(self, ctx: RunContext[VqgConfig], plan: RunPlan[Planned], res: dict[str, Any],
                privacy: dict[str, Any]) -> dict[str, Any]:
        """Samples from the prior, their evaluation and the metrics (an infinite ε₀, ε_y, ... is written as None)."""
        cfg, clock, private = ctx.cfg, ctx.clock, ctx.private
        x, y = clock("sampling", lambda: generate(cfg, res["prior"], res["tokenizer"], cfg.resolved("eval_samples")))
        evals = clock("evaluation", lambda: _evaluate(cfg, private.data, x, y, private.split, ctx.folder))
        return {**common_metrics(cfg, private.data, privacy, evals, private.dropped), **res["fields"]}


def run_dp_vqg(cfg: VqgConfig, out: str | Path, force: bool = False) -> dict[str, Any]:
    """Run DP-VQG and write ``metrics.json``, ``samples.png`` and ``transcript.jsonl`` to ``out``
    (:func:`~sstq_fl.gen.template.run_pipeline`); returns the metrics as written (an infinite value, e.g. ``ε₀`` of
    a reference run, is ``None``)."""
    return run_pipeline(VqgSteps(), cfg, out, force)


def _em_prior(cfg: VqgConfig, s: dict[str, Any], run: DPRunner, model: VQTokenizer, rows: dict[str, np.ndarray],
              public_x: np.ndarray, clock: PhaseClock) -> tuple[Any, dict[str, Any]]:
    """stage2 em after the release: the EM diagnostics on public data, then the prior on the released rows."""
    diag = clock("diagnostics", lambda: em_diagnostics(model, s["budget"].eps0, public_x, cfg.diagnostic_records,
                                                       cfg.seed))
    run.charge_public("em-diagnostics", "EM peakedness measured on public Fashion-MNIST through the released tokenizer")
    prior, losses = clock("prior", lambda: train_prior_on_release(cfg, rows, model.cfg.codebook_size))
    run.charge_public("stage3-prior", "MaskGIT prior trained on the released tokens and labels only (post-processing)")
    return prior, _metrics(cfg, s, diag, losses)


def _dpsgd_prior(cfg: VqgConfig, s: dict[str, Any], run: DPRunner, model: VQTokenizer, prior: Any,
                 public_x: np.ndarray, public_y: np.ndarray, clock: PhaseClock) -> tuple[Any, dict[str, Any]]:
    """stage2 dpsgd-prior: the prior from the clients' rounds, or (public-only reference) trained on public data."""
    if cfg.reference == "public":
        pcfg = prior_config(cfg, model.cfg.codebook_size)
        batch = cfg.resolved("prior_batch")
        pcfg = replace(pcfg, batch=batch, epochs=max(1, math.ceil(cfg.resolved("prior_steps") * batch / len(public_x))))
        prior, _ = clock("prior", lambda: public_prior(model, public_x, public_y, pcfg, cfg.seed + 2, cfg.device))
        run.charge_public("stage3-prior", "MaskGIT prior trained without noise on public Fashion-MNIST tokens and labels")
    return prior, _prior_metrics(cfg, s)


def _metrics(cfg: VqgConfig, s: dict[str, Any], diag: dict[str, Any], losses: list[float]) -> dict[str, Any]:
    """DP-VQG's own ``metrics.json`` fields: the stages' budgets, the EM diagnostics and the labels' status."""
    b: Stage2Budget = s["budget"]
    return {"variant": cfg.variant, "mode": cfg.mode, "stage2": cfg.stage2, "prior_lr": cfg.prior_peak_lr,
            "epsilon_stage1": b.eps1 if math.isfinite(cfg.epsilon) else None,
            "epsilon_stage1_certified": plan_epsilon(s["stage1"], cfg.delta, RELATION), "epsilon_stage2": b.eps2,
            "epsilon_stage2_certified": b.certified_epsilon, "eps0_per_location": b.eps0, "eps_y": b.eps_y,
            "em_nearest_code_prob": diag["em_nearest_code_prob"], "token_entropy_bits": diag["token_entropy_bits"],
            "em_diagnostics": diag, "record_level_epsilon": record_level(b, cfg.delta), "labels": cfg.labels,
            "mode_a_fill_scale": b.scale,
            "labels_note": _labels_note(cfg, b), "stage2_budget": b.report(), "sigma": s["sigma"], "q": s["q"],
            "clip": CLIP, "steps": cfg.resolved("steps"), "expected_batch": cfg.resolved("batch"),
            "prior_loss_first_last": [float(np.mean(losses[:10])), float(np.mean(losses[-10:]))]}


def _prior_metrics(cfg: VqgConfig, s: dict[str, Any]) -> dict[str, Any]:
    """dpsgd-prior's ``metrics.json`` fields: both stages' budgets and noise, no EM fields (``None``)."""
    finite = math.isfinite(cfg.epsilon) and cfg.reference != "public"
    return {"variant": cfg.variant, "mode": cfg.mode, "stage2": cfg.stage2, "prior_lr": cfg.prior_peak_lr,
            "epsilon_stage1": 0.0 if cfg.reference == "public" else split_budget(cfg.epsilon, cfg.variant)[0] if finite
            else None,
            "epsilon_stage1_certified": plan_epsilon(s["stage1"], cfg.delta, RELATION),
            "epsilon_stage2": None, "epsilon_stage2_certified": plan_epsilon(s["stage2"], cfg.delta, RELATION),
            "eps0_per_location": None, "eps_y": None, "em_nearest_code_prob": None, "token_entropy_bits": None,
            "labels": cfg.labels, "labels_note": _labels_note(cfg, None), "sigma": s["sigma"], "q": s["q"],
            "clip": CLIP, "steps": cfg.resolved("steps"), "expected_batch": cfg.resolved("batch"),
            "sigma_prior": s["sigma_prior"], "q_prior": s["q_prior"], "clip_prior": PRIOR_CLIP,
            "prior_steps": cfg.resolved("prior_steps"), "prior_expected_batch": cfg.resolved("prior_batch"),
            "prior_width": cfg.resolved("prior_width")}


def summary(m: dict[str, Any]) -> str:
    """What ``sstq-fl gen dp-vqg`` prints about a run: ε and its stages, the EM diagnostics, accuracy, domain-FD; the
    data set's ledger."""
    eps = eps_text(m["epsilon"])
    eps0 = eps_text(m["eps0_per_location"])
    if m.get("stage2") == "dpsgd-prior" and m["reference"].startswith("public-only"):
        stage2 = "prior trained without noise on public Fashion-MNIST"
    elif m.get("stage2") == "dpsgd-prior":
        sigma = "none: no noise" if m["sigma_prior"] is None else f"{m['sigma_prior']:.4g}"
        stage2 = f"prior by DP-SGD rounds (sigma {sigma}, q {m['q_prior']:.4g})"
    else:
        stage2 = (f"eps0 {eps0} per location, EM nearest-code probability {m['em_nearest_code_prob']:.4g} (public "
                  f"proxy), token entropy {m['token_entropy_bits']:.3f} bits")
    return (f"dp-vqg {m['variant'].upper()} ({m['reference']}): epsilon {eps} at delta {m['delta']:g} ({m['relation']}, "
            f"mode {m['mode']}, labels {m['labels']}, randomness {m['randomness']}), {stage2}\n"
            f"downstream accuracy {m['downstream_accuracy']:.4f}, domain-FD {m['domain_fd']:.4g} (not comparable to "
            f"Inception FID), {m['records']} records on {m['clients']} clients, {m['wall_s']:.1f} s\n{dataset_text(m)}")
