"""DP-MEPF's generator and its training on released statistics (Harder, Jalali Asadabadi, Sutherland & Park,
"Pre-trained Perceptual Features Improve Differentially Private Image Generation", TMLR 2023).

The generator is trained to match the released per-class mean embeddings for a fixed number of steps, reading
nothing but the release and public weights (post-processing); GFMN's Adam moving average (Santos et al.,
"Learning Implicit Generative Models by Matching Perceptual Features", ICCV 2019) is an option.  The
architecture and optimiser settings follow the authors' code (ParkLabML/DP-MEPF) for (F)MNIST.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..tensors import ArrayLike, DeviceLike, check_float, check_labels, seeded
from .features import FeatureExtractor, check_moments, normalize_moments

LOG = logging.getLogger("sstq_fl.gen.mepf")


class Generator(nn.Module):
    """Conditional (F)MNIST generator (the authors' code for Harder et al., TMLR 2023):
    [code | one-hot(y)] → FC hidden → BN → ReLU → FC 16·7·7 → BN →
    ×2 bilinear → conv5×5 16→8 → ReLU → ×2 bilinear → conv5×5 8→1 → sigmoid; output ``[n, 1, 28, 28]`` in [0, 1].
    BatchNorm is allowed: the generator never sees private data."""

    def __init__(self, code_dim: int = 10, hidden: int = 128, num_classes: int = 10):
        super().__init__()
        self.code_dim, self.hidden, self.num_classes = code_dim, hidden, num_classes
        self.fc = nn.Sequential(nn.Linear(code_dim + num_classes, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                nn.Linear(hidden, 16 * 7 * 7), nn.BatchNorm1d(16 * 7 * 7))
        self.conv1 = nn.Conv2d(16, 8, 5, padding=2)
        self.conv2 = nn.Conv2d(8, 1, 5, padding=2)

    def forward(self, code: Tensor, labels: Tensor) -> Tensor:
        h = torch.cat([code, F.one_hot(labels, self.num_classes).to(code.dtype)], dim=1)
        h = self.fc(h).view(-1, 16, 7, 7)
        h = torch.relu(self.conv1(F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)))
        h = self.conv2(F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False))
        return torch.sigmoid(h)


@dataclass(frozen=True)
class GeneratorConfig:
    """Generator-training hyperparameters (Adam β₁ = 0.5, batch 100, read from the authors' code).

    ``m_avg_lr`` is only used when ``moving_average`` (GFMN's Adam moving average) is on.
    """

    steps: int = 500
    batch: int = 100
    lr: float = 3e-3
    m_avg_lr: float = 3e-2
    code_dim: int = 10
    hidden: int = 128
    moving_average: bool = False
    beta1: float = 0.5

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "code_dim", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"GeneratorConfig.{name} must be a positive integer, got {getattr(self, name)}")
        if self.batch < 2:
            raise ValueError("GeneratorConfig.batch must be >= 2 (the generator uses BatchNorm)")
        if not (self.lr > 0 and self.m_avg_lr > 0 and 0 <= self.beta1 < 1):
            raise ValueError(f"need lr > 0, m_avg_lr > 0 and 0 <= beta1 < 1, got {self.lr}, {self.m_avg_lr}, {self.beta1}")

    @classmethod
    def cpu(cls, **overrides: Any) -> GeneratorConfig:
        """CPU profile (our reduction): code 10, hidden 128, 500 steps, batch 100.  lr 3e-3 / m_avg_lr 3e-2 are our
        choice, made on PUBLIC FMNIST class means only (never on private data): the paper's 1e-4/1e-5 are tuned for
        ~100k steps, and over 500 steps the largest of lr ∈ {3e-4, 1e-3, 3e-3} (m_avg_lr = 10·lr) matched best."""
        return replace(cls(steps=500, batch=100, lr=3e-3, m_avg_lr=3e-2, code_dim=10, hidden=128), **overrides)

    @classmethod
    def full(cls, dataset: str = "mnist", **overrides: Any) -> GeneratorConfig:
        """Full profile (the authors' code): code 90, hidden 500, 100k steps, batch 100; lr (moving-average lr) is
        1e-5 (1e-4) for MNIST and 1e-4 (1e-3) for FMNIST."""
        lrs = {"mnist": (1e-5, 1e-4), "fmnist": (1e-4, 1e-3)}
        if dataset not in lrs:
            raise ValueError(f"unknown dataset {dataset!r} for GeneratorConfig.full; expected one of {sorted(lrs)}")
        lr, m_lr = lrs[dataset]
        return replace(cls(steps=100_000, batch=100, lr=lr, m_avg_lr=m_lr, code_dim=90, hidden=500), **overrides)


def _check_targets(fx: FeatureExtractor, means: ArrayLike, class_probs: ArrayLike, m: int,
                   dev: torch.device) -> tuple[Tensor, Tensor]:
    """float32 μ̃ ``[K, m·D]`` and float64 π̃ ``[K]`` on ``dev``, validated against Φ and the moment count."""
    mu = check_float(means, 2, "means")
    p = check_float(class_probs, 1, "class_probs")
    if mu.shape[1] != m * fx.dim:
        raise ValueError(f"means have {mu.shape[1]} columns; Φ ({fx.profile}, D={fx.dim}) with {m} moment(s) needs {m * fx.dim}")
    if p.shape[0] != mu.shape[0] or mu.shape[0] < 2:
        raise ValueError(f"class_probs has {p.shape[0]} entries for {mu.shape[0]} class rows (need >= 2 classes)")
    if float(p.min()) < 0 or not float(p.sum()) > 0:
        raise ValueError("class_probs must be nonnegative with a positive sum")
    return mu.to(dev, torch.float32), (p / p.sum()).to(dev)


def _batch_class_means(emb: Tensor, labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """Per-class means of a batch ``[K, m·D]`` and the mask of classes present in it."""
    onehot = F.one_hot(labels, num_classes).to(emb.dtype)
    counts = onehot.sum(dim=0)
    return (onehot.T @ emb) / counts.clamp_min(1)[:, None], counts > 0


class _MovingAverage:
    """GFMN's Adam moving average: m tracks μ̃ − μ̂_fake by an Adam fit of ‖m − (μ̃ − sg(μ̂_fake))‖² (lr m_avg_lr,
    betas (β₁, 0.999), our choice); the generator objective is −⟨sg(m), μ̂_fake⟩, whose gradient in μ̂_fake equals the
    MMD gradient −2(μ̃ − μ̂_fake) up to the factor 2 once m has caught up."""

    def __init__(self, shape: torch.Size, cfg: GeneratorConfig, dev: torch.device):
        self.m = torch.zeros(shape, device=dev, requires_grad=True)
        self.opt = torch.optim.Adam([self.m], lr=cfg.m_avg_lr, betas=(cfg.beta1, 0.999))

    def objective(self, target: Tensor, fake: Tensor, present: Tensor) -> Tensor:
        fit = (self.m - (target - fake.detach()))[present].pow(2).sum()
        self.opt.zero_grad(set_to_none=True)
        fit.backward()
        self.opt.step()
        return -(self.m.detach()[present] * fake[present]).sum()


@dataclass
class _Trainer:
    gen: Generator
    fx: FeatureExtractor
    target: Tensor
    probs: Tensor
    moments: tuple[int, ...]
    cfg: GeneratorConfig
    rng: torch.Generator
    opt: torch.optim.Optimizer
    mavg: _MovingAverage | None

    def step(self) -> float:
        """One generator update; returns the matching loss Σ_y ‖μ̃_y − μ̂_fake,y‖² over classes in the batch."""
        y = torch.multinomial(self.probs, self.cfg.batch, replacement=True, generator=self.rng)
        z = torch.randn(self.cfg.batch, self.cfg.code_dim, generator=self.rng, device=self.probs.device)
        emb = normalize_moments(self.fx(self.gen(z, y)), self.moments)  # Φ frozen, but gradients flow through it
        fake, present = _batch_class_means(emb, y, self.target.shape[0])
        mmd = (self.target - fake)[present].pow(2).sum()
        obj = mmd if self.mavg is None else self.mavg.objective(self.target, fake, present)
        self.opt.zero_grad(set_to_none=True)
        obj.backward()
        self.opt.step()
        return float(mmd.detach())


def train_generator(fx: FeatureExtractor, means: ArrayLike, class_probs: ArrayLike, moments: Sequence[int] = (1,),
                    cfg: GeneratorConfig | None = None, seed: int = 0, device: DeviceLike = "cpu",
                    log_every: int = 0, on_step: Callable[[int, float], None] | None = None
                    ) -> tuple[Generator, list[float]]:
    """Train G on released statistics only: post-processing (Harder et al., TMLR 2023).

    Minimizes Σ_j Σ_y ‖μ̃_{j,y} − mean_{b: y_b = y} φ_j(G(z_b, y_b))‖² (classes absent from a batch are skipped) with
    y_b ~ π̃, z_b ~ N(0, I), Adam(lr, β₁); or GFMN's moving-average variant when ``cfg.moving_average``.  Runs exactly
    ``cfg.steps`` updates: no early stopping or checkpoint selection on private data (either would read private data outside
    the release).  Φ is moved to
    ``device``, put in eval mode and frozen (``requires_grad=False``); it is not run under no_grad, so gradients
    reach G through it.  Returns G in eval mode and the per-step matching losses; ``log_every > 0`` logs them and
    ``on_step(step, loss)`` (e.g. a progress bar) is called after each step (1-based).
    """
    cfg, mom, dev = cfg or GeneratorConfig.cpu(), check_moments(moments), torch.device(device)
    target, probs = _check_targets(fx, means, class_probs, len(mom), dev)
    fx = fx.to(dev).eval().requires_grad_(False)
    gen = seeded(lambda: Generator(cfg.code_dim, cfg.hidden, target.shape[0]), seed).to(dev).train()
    opt = torch.optim.Adam(gen.parameters(), lr=cfg.lr, betas=(cfg.beta1, 0.999))
    mavg = _MovingAverage(target.shape, cfg, dev) if cfg.moving_average else None
    trainer = _Trainer(gen, fx, target, probs, mom, cfg, torch.Generator(device=dev).manual_seed(seed), opt, mavg)
    history: list[float] = []
    for step in range(cfg.steps):
        history.append(trainer.step())
        if log_every > 0 and (step + 1) % log_every == 0:
            LOG.info("mepf generator step %d/%d: matching loss %.6g", step + 1, cfg.steps, history[-1])
        if on_step is not None:
            on_step(step + 1, history[-1])
    return gen.eval(), history


def sample(generator: Generator, n: int, labels: ArrayLike | None = None, class_probs: ArrayLike | None = None,
           seed: int = 0, device: DeviceLike = "cpu", batch_size: int = 1000) -> tuple[Tensor, Tensor]:
    """Draw ``(x [n, 1, 28, 28] float32 in [0, 1], y [n] int64)`` on the CPU from G in eval mode, z ~ N(0, I).

    Labels: the given ``labels``; else y ~ ``class_probs``; else class-balanced (each class ⌊n/K⌋ or ⌈n/K⌉ times,
    seeded random order).
    """
    if n < 1 or batch_size < 1:
        raise ValueError(f"n and batch_size must be positive, got {n}, {batch_size}")
    dev = torch.device(device)
    y = _sample_labels(n, generator.num_classes, labels, class_probs, seed)
    noise = torch.Generator(device=dev).manual_seed(seed)
    was_training = generator.training
    generator.to(dev).eval()
    try:
        with torch.no_grad():
            xs = [generator(torch.randn(len(yb), generator.code_dim, generator=noise, device=dev), yb.to(dev)).cpu()
                  for yb in y.split(batch_size)]
    finally:
        generator.train(was_training)
    return torch.cat(xs), y


def _sample_labels(n: int, k: int, labels: ArrayLike | None, class_probs: ArrayLike | None, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    if labels is not None:
        return check_labels(labels, n, k)
    if class_probs is None:
        return (torch.arange(n) % k)[torch.randperm(n, generator=g)]
    p = check_float(class_probs, 1, "class_probs")
    if p.shape[0] != k or float(p.min()) < 0 or not float(p.sum()) > 0:
        raise ValueError(f"class_probs must be {k} nonnegative weights with a positive sum")
    return torch.multinomial(p.cpu(), n, replacement=True, generator=g)
