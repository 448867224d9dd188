"""StraightDP's flow model in use: classifier-free-guided Euler sampling (Ho & Salimans, "Classifier-Free
Diffusion Guidance", NeurIPS 2021 Workshop on Deep Generative Models) of the flow-matching model
(:mod:`~sstq_fl.gen.straightdp.flow`; Lipman et al., ICLR 2023), its public pretraining, and the exponential
moving average of its weights.  All of it is public computation or post-processing of released gradients.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..tensors import check_images
from .blocks import FlowConfig, check_class_labels
from .flow import FlowModel, build_flow

# ----------------------------------------------------------------------------------------------- sampling


@torch.no_grad()
def guided_velocity(model: FlowModel, x: Tensor, t: Tensor, labels: Tensor, cfg_scale: float) -> Tensor:
    """CFG (Ho & Salimans 2022): v = v_u + w(v_c − v_u), v_c with the caption, v_u with the null caption; both
    branches in one batched forward."""
    null = torch.full_like(labels, model.cfg.null_label)
    vc, vu = model.velocity(torch.cat([x, x]), torch.cat([t, t]), torch.cat([labels, null])).chunk(2)
    return vu + cfg_scale * (vc - vu)


@torch.no_grad()
def _euler(model: FlowModel, labels: Tensor, x: Tensor, steps: int, cfg_scale: float, t0: float) -> Tensor:
    """x ← x + Δt·v(x, t_k), t_k = t0 + kΔt, Δt = (1 − t0)/steps, k = 0..steps−1."""
    dt = (1.0 - t0) / steps
    for k in range(steps):
        t = torch.full((x.shape[0],), t0 + k * dt, device=x.device, dtype=x.dtype)
        x = x + dt * guided_velocity(model, x, t, labels, cfg_scale)
    return x


def _start_points(n: int, t0: float, x0: Tensor | None, generator: torch.Generator,
                  shape: tuple[int, int, int]) -> Tensor:
    if x0 is None:
        if t0 != 0.0:
            raise ValueError(f"t0 = {t0} > 0 needs a start x0 (noise is the t = 0 end)")
        return torch.randn(n, *shape, generator=generator, device=generator.device).cpu()
    start = torch.as_tensor(x0).float().cpu()
    if tuple(start.shape) != (n, *shape) or not bool(torch.isfinite(start).all()):
        raise ValueError(f"x0: expected finite [{n}, {', '.join(map(str, shape))}], got {tuple(start.shape)}")
    return start


def sample(model: FlowModel, labels: Tensor, steps: int | None = None, cfg_scale: float | None = None,
           generator: torch.Generator | None = None, t0: float = 0.0, x0: Tensor | None = None,
           batch_size: int = 500) -> Tensor:
    """Images ``[n, 1, 28, 28]`` (latent model: latents ``[n, 2, 4, 4]``) for ``labels`` ``[n]`` (``classes`` = null:
    unconditional) by Euler steps of the guided field (:func:`guided_velocity`) from t0 to 1, starting at ``x0``
    or, at t0 = 0, ξ ~ N(0, I) from ``generator`` (default seed 0).  ``steps``/``cfg_scale`` default to the
    model's config (10 or 25, w = 1.5).  Runs in eval mode without gradients (mode restored); the result is in the
    flow's scale [−1, 1] (:func:`to_pixels` maps it back), not clamped."""
    cfg = model.cfg
    steps, w = cfg.sample_steps if steps is None else steps, cfg.cfg_scale if cfg_scale is None else cfg_scale
    if steps < 1 or batch_size < 1 or not 0.0 <= t0 < 1.0 or not math.isfinite(w):
        raise ValueError(f"need steps >= 1, batch_size >= 1, 0 <= t0 < 1, finite cfg_scale; got {steps}, "
                         f"{batch_size}, {t0}, {w}")
    y = check_class_labels(labels, cfg.classes, allow_null=True)
    start = _start_points(len(y), t0, x0, generator or torch.Generator().manual_seed(0), cfg.shape)
    dev, dtype = model._device(), next(model.parameters()).dtype
    was_training = model.training
    model.eval()
    try:
        out = [_euler(model, yb.to(dev), xb.to(dev, dtype), steps, w, t0).cpu()
               for yb, xb in zip(y.split(batch_size), start.split(batch_size))]
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, *cfg.shape)


# ----------------------------------------------------------------------------------------------- pretraining


@torch.no_grad()
def ema_update(ema_model: nn.Module, model: nn.Module, decay: float) -> None:
    """θ̄ ← d·θ̄ + (1 − d)·θ for every parameter (matched by name); buffers are copied.  Used for public
    pretraining and for the server's EMA of the DP-SGD iterates (post-processing)."""
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"EMA decay must lie in [0, 1], got {decay}")
    ema_p, cur_p = dict(ema_model.named_parameters()), dict(model.named_parameters())
    ema_b, cur_b = dict(ema_model.named_buffers()), dict(model.named_buffers())
    if ema_p.keys() != cur_p.keys() or ema_b.keys() != cur_b.keys():
        raise ValueError("EMA model and model have different parameters or buffers")
    for name, p in cur_p.items():
        ema_p[name].lerp_(p.detach(), 1.0 - decay)
    for name, b in cur_b.items():
        ema_b[name].copy_(b)


def _pretrain_step(model: FlowModel, opt: torch.optim.Optimizer, data: Tensor, labels: Tensor, batch: int,
                   generator: torch.Generator) -> float:
    """One AdamW step on the batch mean of the per-example loss; batch and noise from ``generator``."""
    dev = model._device()
    idx = torch.randint(data.shape[0], (batch,), generator=generator)
    noise = model.draw_noise(batch, generator)
    loss = model(data[idx].to(dev), labels[idx].to(dev), noise).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


def _records(x: Tensor, cfg: FlowConfig) -> Tensor:
    """Public records for pretraining: images checked as such (pixel), or finite latents of the config's shape."""
    if cfg.space == "pixel":
        return check_images(x, "public images")
    t = torch.as_tensor(x, dtype=torch.float32)
    if t.ndim < 2 or t[0].numel() != cfg.dim or not bool(torch.isfinite(t).all()):
        raise ValueError(f"public latents: expected finite [n, {cfg.dim}] values, got {tuple(t.shape)}")
    return t.reshape(t.shape[0], *cfg.shape)


def pretrain(x: Tensor, y: Tensor, cfg: FlowConfig | None = None, steps: int = 300, batch: int = 256,
             lr: float = 1e-4, ema: float = 0.999, seed: int = 0, device: str | torch.device = "cpu",
             progress: Callable[[int, int, float], None] | None = None, freeze: bool = True
             ) -> tuple[FlowModel, list[float]]:
    """Public (non-private) pretraining on images ``x`` in [0, 1] (latent model: public latents ``[n, 2, 4, 4]``)
    with labels ``y``: AdamW(lr) on the
    flow-matching loss, ``steps`` batches of ``batch`` drawn uniformly with replacement; init from ``seed``,
    batches and noise from ``torch.Generator(seed)``.  The EMA uses decay min(ema, (1 + s)/(10 + s)) at step s
    (the usual warm-up, so short runs do not return the initialisation).  ``progress(step, steps, loss)`` after
    each step.  Returns the EMA model in eval mode (captions frozen unless ``freeze=False``) and the losses."""
    cfg = cfg or FlowConfig.cpu()
    if steps < 0 or batch < 1 or not lr > 0 or not 0.0 <= ema <= 1.0:
        raise ValueError(f"need steps >= 0, batch >= 1, lr > 0, 0 <= ema <= 1; got {steps}, {batch}, {lr}, {ema}")
    data, labels = _records(x, cfg), check_class_labels(y, cfg.classes)
    if data.shape[0] == 0 or data.shape[0] != labels.shape[0]:
        raise ValueError(f"need as many labels as images (> 0), got {data.shape[0]} and {labels.shape[0]}")
    model = build_flow(cfg, seed).to(torch.device(device)).train()
    shadow = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen, history = torch.Generator().manual_seed(seed), []
    for step in range(steps):
        history.append(_pretrain_step(model, opt, data, labels, batch, gen))
        ema_update(shadow, model, min(ema, (1 + step) / (10 + step)))
        if progress is not None:
            progress(step + 1, steps, history[-1])
    if freeze:
        shadow.freeze_captions()
    return shadow.requires_grad_(True).eval(), history
