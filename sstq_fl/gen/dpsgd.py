"""DP-SGD on the clients (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016, Algorithm 1), as
federated rounds: the client tasks ``dpsgd.clipped_sum`` and ``dpsgd.sampled_clipped_sum`` and the model
registry they build from (:data:`MODELS`).

Each client Poisson-samples its own records at rate ``q`` (the union over clients is Poisson sampling of the
whole data set), computes per-example gradients with ``torch.func.vmap(grad)``, clips each to ``C`` and returns
the sum; the server adds ``N(0, σ²C²I)`` once and divides by ``q·N_decl``
(:meth:`sstq_fl.gen.runner.DPRunner.dpsgd_round`).  Per-example clipping needs examples that do not interact,
so a model with BatchNorm is refused.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..registry import Registry
from .pipelines import BUILTINS, PIPELINES
from .releases import AGGREGATOR_RELEASE
from .runner import Arrays, ClientContext, Scalar, register_client_task

# ----------------------------------------------------------------------------- models for DP-SGD rounds
ModelBuilder = Callable[[dict[str, Scalar]], nn.Module]
MODELS: Registry[ModelBuilder] = Registry("model", builtins=BUILTINS)
"""Models of DP-SGD rounds by name, ``builder(config) -> nn.Module``: this module's and each pipeline's
(registered when its package is imported)."""


def register_model(name: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Register a model for ``dpsgd.clipped_sum`` (a taken name is refused): ``builder(config) -> nn.Module``;
    the loss of one example is ``model(x, y)`` if the module sets ``returns_loss = True``, else cross-entropy
    of ``model(x)``.  No BatchNorm: it couples the examples of a batch, so a per-example clip would no longer
    bound one record's influence."""
    return MODELS.register(name)  # type: ignore[no-any-return]


@register_model("mlp-classifier")
def _mlp(config: dict[str, Scalar]) -> nn.Module:
    hidden = int(config.get("hidden", 64))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def build_model(config: dict[str, Scalar]) -> nn.Module:
    """The registered model ``config["model"]``, built from ``config``; one with BatchNorm is refused."""
    name = str(config.get("model", ""))
    if name not in MODELS:
        PIPELINES.load()  # a plug-in pipeline registers its models on import
    model = MODELS[name](config)
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        raise ValueError(f"model {name!r} has BatchNorm, which couples examples and breaks per-example clipping")
    return model


def example_loss(model: nn.Module, buffers: dict[str, torch.Tensor] | None = None) -> Callable[..., torch.Tensor]:
    """The loss of one example: ``model(x, y[, noise])`` itself when the model sets
    ``returns_loss = True`` (e.g. a VQ-VAE's reconstruction loss, or a flow-matching loss
    averaged over the example's own noise draws), else cross-entropy of ``model(x)``.
    ``buffers`` (broadcast frozen state, e.g. a frozen caption table) enter the call but are not
    differentiated."""
    returns_loss = bool(getattr(model, "returns_loss", False))
    frozen = dict(buffers or {})

    def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *noise: torch.Tensor) -> torch.Tensor:
        state = {**frozen, **params}
        if returns_loss:
            args = (x[None], y[None], *(n[None] for n in noise))
            return functional_call(model, state, args).reshape(())  # type: ignore[no-any-return]
        return torch.nn.functional.cross_entropy(functional_call(model, state, (x[None],)), y[None])

    return loss


def per_example_clipped_sum(model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                            clip: float, noise: torch.Tensor | None = None,
                            buffers: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """``Σ_i clip_C(∇ℓ(θ; x_i, y_i[, ξ_i]))`` over the given examples (``vmap(grad)``; Abadi et al., CCS 2016).

    ``noise`` (``[n, ...]``) holds each example's own random draws (e.g. StraightDP's noise
    multiplicity: M draws of (t, ξ) averaged inside ℓ **before** the single clip); ``buffers``
    are frozen state that the loss reads but nobody differentiates (nor clips)."""
    if x.shape[0] == 0:
        return {k: torch.zeros_like(v) for k, v in params.items()}
    extra = () if noise is None else (noise,)
    g = vmap(grad(example_loss(model, buffers)), in_dims=(None, 0, 0, *(0 for _ in extra)))(params, x, y, *extra)
    norms = torch.sqrt(sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in g.values()))  # type: ignore[arg-type]
    scale = (clip / (norms + 1e-12)).clamp(max=1.0)
    return {k: (v * scale.view(-1, *([1] * (v.ndim - 1)))).sum(0) for k, v in g.items()}


@register_client_task("dpsgd.clipped_sum", AGGREGATOR_RELEASE)
def dpsgd_clipped_sum(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """Poisson-sample own records at rate ``q`` (the client's protective coins, :meth:`ClientContext.uniform`:
    its own secret key in secure mode), return the sum of per-example gradients clipped to ``clip``: a zero
    vector when nothing was sampled, never a count, so the reply does not reveal how many records were drawn.

    A model with ``draw_noise(n, generator) -> Tensor`` gets each example's random draws from the
    client's own ``generator("poisson")`` (non-protective: they are part of the clipped loss).  Payload
    entries that name the model's buffers (frozen broadcast state) are read, not differentiated; the
    reply holds one summed gradient per parameter."""
    model = build_model(config).to(ctx.device)
    frozen = {name for name, _ in model.named_buffers()}
    params = {k: torch.as_tensor(v, device=ctx.device) for k, v in payload.items() if k not in frozen}
    buffers = {k: torch.as_tensor(v, device=ctx.device) for k, v in payload.items() if k in frozen}
    take = ctx.uniform("poisson", len(ctx.y)) < float(config["q"])
    g = ctx.generator("poisson")
    x = torch.as_tensor(ctx.x[take], device=ctx.device)
    y = torch.as_tensor(ctx.y[take], device=ctx.device)
    draw = getattr(model, "draw_noise", None)
    noise = draw(len(y), g).to(ctx.device) if draw is not None and len(y) else None
    sums = per_example_clipped_sum(model, params, x, y, float(config["clip"]), noise, buffers)
    return {k: v.detach().cpu().double().numpy() for k, v in sums.items()}


@register_client_task("dpsgd.sampled_clipped_sum", AGGREGATOR_RELEASE)
def sampled_clipped_sum(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """``dpsgd.clipped_sum`` as in round ``config["step"]``: the same Poisson coins and clipped per-example gradient
    sum a DP-SGD round of that number computes, for a pipeline's ``ε = ∞`` reference, whose server adds no noise
    (:meth:`~sstq_fl.gen.runner.DPRunner.non_private_sum`, recorded as non-private); naming the round keeps
    reproducible runs sampling afresh each step."""
    step = ClientContext(ctx.cid, ctx.x, ctx.y, ctx.seed, int(config["step"]), ctx.device, ctx.randomness)
    return dpsgd_clipped_sum(step, payload, config)
