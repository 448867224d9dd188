"""DP-VQG with a DP-SGD prior (``--stage2 dpsgd-prior``): the class-conditional MaskGIT prior trained by DP-SGD
rounds on the clients, in place of exponential-mechanism tokens.

Each client tokenizes **its own** records with the broadcast tokenizer Θ (public, PP-VQG; or Stage I's DP-SGD
tokenizer, FP-VQG): ``z_l = argmin_k ‖Π_1(E(x)_l) − c̄_k‖²``.  The argmin tokens never leave the client: they enter
the per-example MaskGIT loss (Chang, Zhang, Jiang, Liu & Freeman, CVPR 2022) of a DP-SGD round (Abadi et al., CCS
2016, Algorithm 1) through :meth:`~sstq_fl.gen.runner.DPRunner.dpsgd_round`:

* each client includes each of its records independently with probability ``q = B/N_decl`` (its own protective
  coins), so the union is Poisson sampling at rate ``q``;
* per sampled record, the loss ``ℓ(θ; x, y) = mean over masked l of −log p_θ(z_l | z_unmasked, ỹ)``, with the mask
  (``⌈cos(πr/2)·HW⌉`` positions, ``r ~ U(0, 1)``) and the label dropout to ∅ (probability 0.1, classifier-free
  guidance; Ho & Salimans, 2021) drawn **inside** the example's loss from the client's non-protective generator
  (post-sampling randomness of the loss itself);
* per-example gradients by ``torch.func.vmap(grad)`` (:func:`~sstq_fl.gen.dpsgd.per_example_clipped_sum`), each
  clipped to ``C``; the client returns their sum (zeros when it sampled nothing, never a count);
* the server adds ``N(0, σ²C²I)`` once, divides by ``q·N_decl`` and takes one AdamW step (cosine learning rate).

The model is registered for DP-SGD rounds as ``"vqg-prior"`` (:class:`PriorOnRecords`): the prior's parameters
are differentiated and clipped; Θ's encoder and normalised codebook travel as **buffers** (frozen broadcast state,
read, never differentiated).  No BatchNorm anywhere (GroupNorm in Θ, LayerNorm in the prior).  Labels are part of
the record and enter the clipped gradient, so no separate label release is needed.

Accounting: ``steps × PoissonSampledEvent(q, GaussianEvent(σ))`` under the pipeline's one relation,
``replace_one``: dp-accounting's PLD of the Poisson-subsampled Gaussian supports it directly (the mixture pair
``(1−q)N(0, σ²) + qN(∓2C, σ²)``, the replaced record keeping its inclusion coin; Zhu, Dong & Wang, AISTATS 2022),
so no conversion through add/remove is needed.  ``σ`` is the smallest noise multiplier at which the **joint**
ledger (FP: Stage I's DP-SGD events at its ``0.8ε`` calibration first; PP: nothing private before) certifies ``ε``
at ``δ``.  Sampling from the prior and decoding with Θ's decoder is post-processing.

``reference="public"`` is the public-only reference: the PP tokenizer and the same prior trained without noise on
public Fashion-MNIST tokens and labels on the server; it reads no private record (ε = 0 on the ledger) and shows what
the public data alone gives.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...privacy.calibration import calibrate_noise_multiplier
from ...privacy.events import GaussianEvent, NonPrivateEvent, PoissonSampledEvent, PrivacyEvent
from ...progress import progress
from ..dpsgd import register_model
from ..runner import NONPRIVATE_SUMS, DPRunner, Scalar
from . import maskgit as mg
from .mechanism import RELATION
from .tokenizer import HW, TokenizerConfig, VQTokenizer, project_unit, squared_distances

Plan = list[tuple[PrivacyEvent, int]]
MODEL = "vqg-prior"
STAGE = "stage2-prior"
CLIP = 1.0  # C, the per-example clip of the prior's DP-SGD (our choice)
_FROZEN = "frozen."  # buffer names of Θ's encoder and codes inside :class:`PriorOnRecords`
_PRIOR_FIELDS = ("d_model", "layers", "heads")


def _buffers_only(module: nn.Module) -> nn.Module:
    """``module`` with every parameter turned into a buffer of the same name (frozen state: never differentiated)."""
    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                del m._parameters[name]
                m.register_buffer(name, p.detach())
    return module


class FrozenEncoder(nn.Module):
    """Θ's encoder E and normalised codebook c̄ as buffers: ``tokens(x) = argmin_k ‖Π_1(E(x)_l) − c̄_k‖²``."""

    def __init__(self, cfg: TokenizerConfig):
        super().__init__()
        self.encoder = _buffers_only(VQTokenizer(cfg).encoder)
        self.register_buffer("codes", torch.zeros(cfg.codebook_size, cfg.dim))

    def tokens(self, x: Tensor) -> Tensor:
        """Argmin token indices ``[n, HW]`` of images ``[n, 1, 28, 28]`` (no gradient flows through an index)."""
        z = project_unit(self.encoder(x).flatten(2).transpose(1, 2))
        codes: Tensor = self.get_buffer("codes")
        return squared_distances(z, codes).argmin(-1)


class PriorOnRecords(nn.Module):
    """The DP-SGD model ``"vqg-prior"``: ``model(x, y, noise)`` is the MaskGIT loss of each record ``[n]``.

    ``noise`` ``[n, HW + 2]`` holds each record's own uniforms (:meth:`draw_noise`): ``r`` (mask ratio), ``HW``
    scores (which positions are masked: the ``⌈cos(πr/2)·HW⌉`` lowest) and the label-dropout coin.  Only
    ``prior.*`` are parameters; ``frozen.*`` (Θ) are buffers."""

    returns_loss = True

    def __init__(self, prior_cfg: mg.PriorConfig, tok_cfg: TokenizerConfig):
        super().__init__()
        self.prior = mg.MaskGIT(prior_cfg)
        self.frozen = FrozenEncoder(tok_cfg)

    def draw_noise(self, n: int, generator: torch.Generator) -> Tensor:
        """Each record's uniforms ``[n, HW + 2]`` from the client's non-protective generator."""
        return torch.rand(n, self.prior.cfg.hw + 2, generator=generator, device=generator.device)

    def forward(self, x: Tensor, y: Tensor, noise: Tensor) -> Tensor:
        with torch.no_grad():
            tokens = self.frozen.tokens(x)
        return masked_loss_from_noise(self.prior, tokens, y, noise)


def masked_loss_from_noise(prior: mg.MaskGIT, tokens: Tensor, labels: Tensor, noise: Tensor) -> Tensor:
    """Per-record MaskGIT loss ``[n]`` with the masks and label dropout read from ``noise`` (no boolean indexing,
    so ``vmap`` can batch it): mean cross-entropy over each record's masked positions."""
    cfg = prior.cfg
    r, scores, drop = noise[:, 0], noise[:, 1:cfg.hw + 1], noise[:, cfg.hw + 1]
    ranks = scores.argsort(dim=1).argsort(dim=1)
    mask = ranks < mg.mask_count(r, cfg.hw)[:, None]
    masked = torch.where(mask, torch.full_like(tokens, cfg.mask_id), tokens)
    y = torch.where(drop < cfg.label_dropout, torch.full_like(labels, cfg.null_class), labels)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):  # batchable under vmap
        logits = prior(masked, y)
    ce = F.cross_entropy(logits.transpose(1, 2), tokens, reduction="none")
    w = mask.to(ce.dtype)
    return (ce * w).sum(1) / w.sum(1)


def prior_overrides(config: dict[str, Scalar]) -> dict[str, int]:
    """The prior's size fields present in a round's ``config`` (``d_model``, ``layers``, ``heads``)."""
    return {f: int(config[f]) for f in _PRIOR_FIELDS if f in config}


@register_model(MODEL)
def _prior_model(config: dict[str, Scalar]) -> nn.Module:
    """``dpsgd.clipped_sum`` builder: ``config["profile"]`` (cpu/full) sets Θ's architecture and the prior's
    (vocabulary ``K`` from Θ), with the prior's size fields overridable."""
    profile = str(config.get("profile", "cpu"))
    tok = TokenizerConfig.profile(profile)
    base = mg.PriorConfig.cpu if profile == "cpu" else mg.PriorConfig.full
    return PriorOnRecords(base(vocab_size=tok.codebook_size, hw=HW, **prior_overrides(config)), tok)


def frozen_payload(tokenizer: VQTokenizer) -> dict[str, np.ndarray]:
    """Θ's encoder weights and normalised codes as the broadcast buffers ``frozen.*`` of :class:`PriorOnRecords`."""
    out = {f"{_FROZEN}encoder.{k}": v.detach().cpu().numpy() for k, v in tokenizer.encoder.state_dict().items()}
    out[f"{_FROZEN}codes"] = tokenizer.codes().detach().cpu().numpy()
    return out


# ----------------------------------------------------------------------------- accounting
def prior_plan(q: float, sigma: float | None, steps: int) -> Plan:
    """The prior's events: ``steps × PoissonSampled(q, Gaussian(σ))`` (``σ = None``: the non-private reference)."""
    if sigma is None:
        return [(NonPrivateEvent(NONPRIVATE_SUMS), steps)]
    return [(PoissonSampledEvent(q, GaussianEvent(sigma)), steps)]


def calibrate_prior(epsilon: float, delta: float, q: float, steps: int, prefix: Plan) -> float:
    """The smallest ``σ`` at which the joint ledger, ``prefix`` (Stage I's events) then :func:`prior_plan`, certifies
    ``(ε, δ)`` under ``replace_one`` (:func:`~sstq_fl.privacy.calibration.calibrate_noise_multiplier`)."""
    return calibrate_noise_multiplier(epsilon, delta, lambda s: [*prefix, *prior_plan(q, s, steps)], RELATION)


# ----------------------------------------------------------------------------- training
def _round_config(profile: str, device: str, overrides: dict[str, int]) -> dict[str, Scalar]:
    return {"model": MODEL, "profile": profile, "device": device, **overrides}


def _noisy_gradient(run: DPRunner, prior: mg.MaskGIT, frozen: dict[str, np.ndarray], conf: dict[str, Scalar],
                    q: float, sigma: float | None, step: int) -> dict[str, np.ndarray]:
    """One round's released gradient of the prior: DP-SGD (σ), or the same sums without noise (σ = None)."""
    payload = {f"prior.{k}": v.detach().cpu().numpy() for k, v in prior.named_parameters()}
    payload.update(frozen)
    if sigma is not None:
        return run.dpsgd_round(STAGE, "dpsgd.clipped_sum", payload, conf, q, CLIP, sigma)
    sums = run.non_private_sum(STAGE, "dpsgd.sampled_clipped_sum", payload,
                               {**conf, "q": q, "clip": CLIP, "step": step}, CLIP)
    return {k: v / (q * run.n_decl) for k, v in sums.items()}


def train_prior_dpsgd(run: DPRunner, tokenizer: VQTokenizer, pcfg: mg.PriorConfig, profile: str, device: str,
                      q: float, sigma: float | None, steps: int, seed: int) -> mg.MaskGIT:
    """``steps`` DP-SGD rounds of the prior on the clients, AdamW with MaskGIT's betas and weight decay and a cosine
    learning rate ``pcfg.lr → pcfg.lr_min``; initialised from ``seed`` (never from data)."""
    prior = mg.build_prior(pcfg, seed).to(torch.device(device)).train()
    opt = torch.optim.AdamW(prior.parameters(), lr=pcfg.lr, betas=pcfg.betas, weight_decay=pcfg.weight_decay)
    conf = _round_config(profile, device, {f: int(getattr(pcfg, f)) for f in _PRIOR_FIELDS})
    frozen = frozen_payload(tokenizer)
    with progress(steps, "dp-vqg prior DP-SGD rounds") as bar:
        for step in range(1, steps + 1):
            for group in opt.param_groups:
                group["lr"] = mg.cosine_lr(step - 1, max(steps - 1, 1), pcfg.lr, pcfg.lr_min)
            grads = _noisy_gradient(run, prior, frozen, conf, q, sigma, step)
            for k, p in prior.named_parameters():
                p.grad = torch.as_tensor(grads[f"prior.{k}"], dtype=p.dtype, device=p.device)
            opt.step()
            bar.update(step)
    return prior.eval()


@torch.no_grad()
def public_prior(tokenizer: VQTokenizer, public_x: np.ndarray, public_y: np.ndarray, pcfg: mg.PriorConfig,
                 seed: int, device: str) -> tuple[mg.MaskGIT, list[float]]:
    """The public-only reference's prior: argmin tokens of public Fashion-MNIST through Θ with their own labels,
    trained without noise on the server (:func:`~sstq_fl.gen.vqg.maskgit.train_prior`); no private record."""
    dev = next(tokenizer.parameters()).device
    x = torch.as_tensor(public_x)
    tokens = torch.cat([tokenizer.encode_indices(b.to(dev)).cpu() for b in x.split(1000)])
    with torch.enable_grad():
        return mg.train_prior(tokens, torch.as_tensor(public_y).long(), pcfg, torch.Generator().manual_seed(seed),
                              None, device)


def expected_batch_rate(batch: int, n_decl: int) -> float:
    """``q = B/N_decl`` (at most 1) for the prior's rounds."""
    return min(1.0, batch / n_decl) if n_decl > 0 else math.nan
