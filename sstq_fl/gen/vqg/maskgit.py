"""DP-VQG Stage III: a class-conditional MaskGIT prior over released token maps.

Chang, Zhang, Jiang, Liu & Freeman, "MaskGIT: Masked Generative Image Transformer", CVPR 2022; classifier-free
guidance after Ho & Salimans, "Classifier-Free Diffusion Guidance", NeurIPS 2021 Workshop on Deep Generative
Models.  The prior is trained only on the
sanitised Stage II output (Z̃, ỹ), so it is post-processing and charged nothing.

* Input: ``[class token, x_1, …, x_HW]`` with x_l ∈ {0, …, K−1} ∪ {[MASK] = K}, learned positional embeddings, a
  class embedding over ``num_classes + 1`` entries (the last one is the null class ∅ used for CFG); a pre-LN
  transformer encoder (bidirectional) and a linear head to K logits per token position.
* Training: r ~ U(0, 1) per sequence, mask ⌈cos(πr/2)·HW⌉ uniformly chosen positions (:func:`draw_mask`), cross-entropy
  on the masked positions only; the label is replaced by ∅ with probability 0.1 (label dropout rate: our choice); AdamW
  (β = (0.9, 0.96), weight decay 0.045: MaskGIT's values, our choice here) with a cosine learning-rate decay 10⁻⁴ →
  5·10⁻⁶ over all steps (:func:`cosine_lr`).  Dropout inside the transformer is 0 by default, so every random draw
  (init, batches, masks, label dropout) comes from the passed ``torch.Generator``.
* Sampling (MaskGIT's iterative decoding, T steps): start fully masked; at step t draw every masked token from
  softmax(ℓ) with the guided logits ℓ = ℓ_u + w(ℓ_c − ℓ_u) (ℓ_c with the class, ℓ_u with ∅); confidence
  log p(sampled) + τ_t·Gumbel with the annealed choice temperature τ_t = 4.5·(1 − (t+1)/T); keep the most
  confident and re-mask the ``n_t = ⌊HW·cos(π/2·(t+1)/T)⌋`` least confident (clamped so at least one token is
  fixed per step), until nothing is masked after step T (:func:`mask_schedule`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..tensors import seeded


@dataclass(frozen=True)
class PriorConfig:
    """MaskGIT prior hyperparameters.

    ``vocab_size``: K; ``hw``: tokens per image; ``num_classes``: class labels (∅ = ``num_classes``);
    ``d_model``/``layers``/``heads``: the transformer; ``epochs``/``batch``/``lr``/``lr_min``: training;
    ``label_dropout``: p(∅) in training; ``sample_steps``: T; ``cfg_scale``: w; ``choice_temperature``: the
    initial confidence-noise temperature."""

    vocab_size: int = 64
    hw: int = 49
    num_classes: int = 10
    d_model: int = 64
    layers: int = 2
    heads: int = 2
    mlp_ratio: int = 4
    dropout: float = 0.0
    epochs: int = 3
    batch: int = 120
    lr: float = 1e-4
    lr_min: float = 5e-6
    weight_decay: float = 0.045
    betas: tuple[float, float] = (0.9, 0.96)
    label_dropout: float = 0.1
    sample_steps: int = 8
    cfg_scale: float = 4.0
    choice_temperature: float = 4.5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hw", "num_classes", "d_model", "layers", "heads", "mlp_ratio", "batch",
                     "sample_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"PriorConfig.{name} must be a positive integer, got {getattr(self, name)}")
        if self.epochs < 0 or self.d_model % self.heads:
            raise ValueError(f"need epochs >= 0 and heads dividing d_model; got {self.epochs}, {self.d_model}/{self.heads}")
        if not (0 < self.lr_min <= self.lr and 0 <= self.label_dropout < 1 and 0 <= self.dropout < 1):
            raise ValueError("need 0 < lr_min <= lr, 0 <= label_dropout < 1 and 0 <= dropout < 1")
        if self.choice_temperature < 0:
            raise ValueError(f"choice_temperature must be >= 0, got {self.choice_temperature}")

    @property
    def mask_id(self) -> int:
        """The [MASK] token id, K."""
        return self.vocab_size

    @property
    def null_class(self) -> int:
        """The null class ∅ (unconditional branch of CFG)."""
        return self.num_classes

    @classmethod
    def cpu(cls, **overrides: Any) -> PriorConfig:
        """CPU profile (our reduction): K = 64, 7×7 grid, d_model/L/heads = 64/2/2, 3 epochs, T = S = 8."""
        return replace(cls(vocab_size=64, hw=49, d_model=64, layers=2, heads=2, epochs=3, sample_steps=8), **overrides)

    @classmethod
    def full(cls, **overrides: Any) -> PriorConfig:
        """Full (F)MNIST profile (MaskGIT's transformer at (F)MNIST scale): K = 1024, 384/6/6, 120 epochs, batch 120, T
        = 16, CFG 4.0."""
        return replace(cls(vocab_size=1024, hw=49, d_model=384, layers=6, heads=6, epochs=120, batch=120,
                           sample_steps=16, cfg_scale=4.0), **overrides)


class MaskGIT(nn.Module):
    """Bidirectional transformer: ``forward(tokens [n, HW] in [0, K], labels [n] in [0, C]) -> logits [n, HW, K]``."""

    def __init__(self, cfg: PriorConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.tok = nn.Embedding(cfg.vocab_size + 1, d)
        self.cls = nn.Embedding(cfg.num_classes + 1, d)
        self.pos = nn.Parameter(0.02 * torch.randn(1, cfg.hw + 1, d))
        layer = nn.TransformerEncoderLayer(d, cfg.heads, cfg.mlp_ratio * d, cfg.dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg.vocab_size)

    def forward(self, tokens: Tensor, labels: Tensor) -> Tensor:
        h = torch.cat([self.cls(labels)[:, None], self.tok(tokens)], dim=1) + self.pos
        return self.head(self.norm(self.blocks(h))[:, 1:])  # type: ignore[no-any-return]


def build_prior(cfg: PriorConfig, seed: int = 0) -> MaskGIT:
    """A freshly initialised prior from ``seed`` (private CPU RNG)."""
    return seeded(lambda: MaskGIT(cfg), seed)


# ----------------------------------------------------------------------------------------------- schedules


def cosine_lr(step: int, total: int, lr_max: float = 1e-4, lr_min: float = 5e-6) -> float:
    """Cosine decay lr(s) = lr_min + ½(lr_max − lr_min)(1 + cos(π·s/S)), s = 0..S (lr_max at 0, lr_min at S)."""
    if total <= 0:
        return lr_max
    s = min(max(step, 0), total)
    return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + math.cos(math.pi * s / total))


def mask_count(r: Tensor, hw: int) -> Tensor:
    """Masked positions for a training ratio r ∈ [0, 1): ⌈cos(πr/2)·HW⌉, clamped to [1, HW]."""
    return torch.ceil(torch.cos(math.pi * r.double() / 2) * hw).long().clamp(1, hw)


def draw_mask(n: int, hw: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Training masks ``(mask [n, HW] bool, r [n] float64)``: r ~ U(0, 1), row i masks :func:`mask_count` (r_i)
    positions chosen uniformly (the lowest ranks of iid uniform scores)."""
    dev = generator.device
    r = torch.rand(n, generator=generator, device=dev, dtype=torch.float64)
    scores = torch.rand(n, hw, generator=generator, device=dev)
    ranks = scores.argsort(dim=1).argsort(dim=1)
    return ranks < mask_count(r, hw)[:, None].to(dev), r


def mask_schedule(hw: int, steps: int) -> list[int]:
    """Tokens still masked after each decoding step t = 0..T−1: ⌊HW·cos(π/2·(t+1)/T)⌋, clamped so that every step
    fixes at least one token (when any is left), and 0 after the last step (MaskGIT's cosine schedule)."""
    out, left = [], hw
    for t in range(steps):
        m = 0 if t == steps - 1 else min(left - 1, max(1, math.floor(hw * math.cos(math.pi / 2 * (t + 1) / steps))))
        left = max(m, 0)
        out.append(left)
    return out


# ----------------------------------------------------------------------------------------------- training


def _check_tokens(tokens: Tensor, labels: Tensor, cfg: PriorConfig, allow_null: bool = False) -> tuple[Tensor, Tensor]:
    t, y = torch.as_tensor(tokens), torch.as_tensor(labels)
    if t.ndim != 2 or t.shape[1] != cfg.hw:
        raise ValueError(f"tokens: expected [n, {cfg.hw}], got {tuple(t.shape)}")
    if y.ndim != 1 or y.shape[0] != t.shape[0]:
        raise ValueError(f"labels: expected [{t.shape[0]}], got {tuple(y.shape)}")
    if t.is_floating_point() or y.is_floating_point():
        raise ValueError("tokens and labels must be integers")
    top = cfg.num_classes + 1 if allow_null else cfg.num_classes
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= cfg.vocab_size):
        raise ValueError(f"tokens must lie in [0, {cfg.vocab_size})")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= top):
        raise ValueError(f"labels must lie in [0, {top})")
    return t.long(), y.long()


def masked_loss(model: MaskGIT, tokens: Tensor, labels: Tensor, generator: torch.Generator) -> Tensor:
    """One training objective: mask per :func:`draw_mask`, drop labels to ∅ with p = ``label_dropout``, and
    return the mean cross-entropy over the masked positions."""
    cfg = model.cfg
    mask, _ = draw_mask(tokens.shape[0], cfg.hw, generator)
    mask = mask.to(tokens.device)
    drop = torch.rand(labels.shape[0], generator=generator, device=generator.device).to(labels.device) < cfg.label_dropout
    logits = model(tokens.masked_fill(mask, cfg.mask_id), labels.masked_fill(drop, cfg.null_class))
    return F.cross_entropy(logits[mask], tokens[mask])


def train_prior(tokens: Tensor, labels: Tensor, cfg: PriorConfig, generator: torch.Generator,
                progress: Callable[[int, int, float], None] | None = None, device: str | torch.device = "cpu"
                ) -> tuple[MaskGIT, list[float]]:
    """Train the prior on released ``(tokens [n, HW], labels [n])`` for ``cfg.epochs`` epochs of shuffled batches
    of ``cfg.batch`` (the last one may be smaller) with the cosine lr schedule, one update per batch.

    The initial weights, shuffles, masks and label dropout all come from ``generator`` (a CPU generator).
    ``progress(step, total_steps, loss)`` is called after each step (1-based).  Returns the model in eval mode
    and the per-step losses."""
    t, y = _check_tokens(tokens, labels, cfg)
    n = t.shape[0]
    if n == 0:
        raise ValueError("no tokens to train the prior on")
    dev = torch.device(device)
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    model = build_prior(cfg, seed).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    per_epoch = math.ceil(n / cfg.batch)
    total = cfg.epochs * per_epoch
    history: list[float] = []
    for epoch in range(cfg.epochs):
        order = torch.randperm(n, generator=generator)
        for b in range(per_epoch):
            step = epoch * per_epoch + b
            for group in opt.param_groups:
                group["lr"] = cosine_lr(step, max(total - 1, 1), cfg.lr, cfg.lr_min)
            idx = order[b * cfg.batch:(b + 1) * cfg.batch]
            loss = masked_loss(model, t[idx].to(dev), y[idx].to(dev), generator)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            history.append(float(loss.detach()))
            if progress is not None:
                progress(step + 1, total, history[-1])
    return model.eval(), history


# ----------------------------------------------------------------------------------------------- sampling


def guided_logits(model: MaskGIT, tokens: Tensor, labels: Tensor, cfg_scale: float) -> Tensor:
    """Classifier-free guidance (Ho & Salimans 2022): ℓ = ℓ_u + w(ℓ_c − ℓ_u), ℓ_c = model(x, y), ℓ_u = model(x, ∅).
    Both branches run as one batch; w = 0 is the unconditional model, w = 1 the conditional one."""
    null = torch.full_like(labels, model.cfg.null_class)
    both = model(torch.cat([tokens, tokens]), torch.cat([labels, null]))
    cond, uncond = both.chunk(2)
    return uncond + cfg_scale * (cond - uncond)


def _gumbel(shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    u = torch.rand(shape, generator=generator, device=generator.device)
    return -torch.log(-torch.log(u.clamp(1e-20, 1.0 - 1e-7)))


@torch.no_grad()
def _decode(model: MaskGIT, labels: Tensor, cfg: PriorConfig, generator: torch.Generator) -> Tensor:
    n, hw, dev = labels.shape[0], cfg.hw, labels.device
    tokens = torch.full((n, hw), cfg.mask_id, dtype=torch.long, device=dev)
    unknown = torch.ones(n, hw, dtype=torch.bool, device=dev)
    for t, left in enumerate(mask_schedule(hw, cfg.sample_steps)):
        logp = torch.log_softmax(guided_logits(model, tokens, labels, cfg.cfg_scale).float(), dim=-1)
        sampled = (logp + _gumbel(tuple(logp.shape), generator).to(dev)).argmax(-1)
        sampled = torch.where(unknown, sampled, tokens)
        if left == 0:
            return sampled
        conf = logp.gather(-1, sampled[..., None]).squeeze(-1)
        temp = cfg.choice_temperature * (1.0 - (t + 1) / cfg.sample_steps)
        conf = conf + temp * _gumbel((n, hw), generator).to(dev)
        conf = conf.masked_fill(~unknown, math.inf)  # fixed tokens are never re-masked
        remask = torch.zeros_like(unknown).scatter(1, conf.argsort(dim=1)[:, :left], True)
        tokens, unknown = sampled.masked_fill(remask, cfg.mask_id), remask
    return tokens


def sample(model: MaskGIT, labels: Tensor, cfg: PriorConfig | None = None, generator: torch.Generator | None = None,
           batch_size: int = 500) -> Tensor:
    """Draw token maps ``[n, HW]`` in [0, K) for ``labels`` ``[n]`` (``num_classes`` = ∅ samples unconditionally)
    by T-step MaskGIT decoding with CFG scale ``cfg.cfg_scale`` (module docstring); ``cfg`` defaults to the
    model's.  All randomness comes from ``generator`` (default: seed 0), so equal generators give equal samples.
    The model is run in eval mode and restored afterwards; batches of ``batch_size`` are decoded in order."""
    cfg = cfg or model.cfg
    if (cfg.vocab_size, cfg.hw, cfg.num_classes) != (model.cfg.vocab_size, model.cfg.hw, model.cfg.num_classes):
        raise ValueError("sampling config does not match the model's vocabulary, grid or classes")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    gen = generator or torch.Generator().manual_seed(0)
    dev = next(model.parameters()).device
    _, y = _check_tokens(torch.zeros(len(labels), cfg.hw, dtype=torch.long), torch.as_tensor(labels), cfg,
                         allow_null=True)
    was_training = model.training
    model.eval()
    try:
        out = [_decode(model, yb.to(dev), cfg, gen).cpu() for yb in y.split(batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, cfg.hw, dtype=torch.long)
