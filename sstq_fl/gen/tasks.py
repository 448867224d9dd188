"""Built-in client tasks of the DP workload runner (see :mod:`sstq_fl.gen.runner`).

Each task is ``fn(ctx, payload, config) -> arrays``: it sees only its own records, the
broadcast payload (numpy arrays) and scalars, and returns numpy arrays.  Per-record
contributions are bounded **on the client** (clipping), so the server's noise scale holds
whatever a client computes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..privacy.clipping import clip_rows
from .mepf import FeatureExtractor
from .runner import Arrays, ClientContext, Scalar, register_client_task

# ----------------------------------------------------------------------------- models for DP-SGD rounds
ModelBuilder = Callable[[dict[str, Scalar]], nn.Module]
_MODELS: dict[str, ModelBuilder] = {}


def register_model(name: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Register a model for ``dpsgd.clipped_sum``: ``builder(config) -> nn.Module``; the loss of
    one example is ``model(x, y)`` if the module sets ``returns_loss = True``, else cross-entropy
    of ``model(x)``.  No BatchNorm (it couples examples; spec §1.3)."""

    def deco(fn: ModelBuilder) -> ModelBuilder:
        _MODELS[name] = fn
        return fn

    return deco


@register_model("mlp-classifier")
def _mlp(config: dict[str, Scalar]) -> nn.Module:
    hidden = int(config.get("hidden", 64))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def build_model(config: dict[str, Scalar]) -> nn.Module:
    name = str(config.get("model", ""))
    if name not in _MODELS:
        raise KeyError(f"unknown model {name!r} for DP-SGD; registered: {sorted(_MODELS)}")
    model = _MODELS[name](config)
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        raise ValueError(f"model {name!r} has BatchNorm, which couples examples and breaks per-example clipping")
    return model


def _example_loss(model: nn.Module, buffers: dict[str, torch.Tensor] | None = None) -> Callable[..., torch.Tensor]:
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
    """``Σ_i clip_C(∇ℓ(θ; x_i, y_i[, ξ_i]))`` over the given examples (``vmap(grad)``, Abadi et al. 2016).

    ``noise`` (``[n, ...]``) holds each example's own random draws (e.g. StraightDP's noise
    multiplicity: M draws of (t, ξ) averaged inside ℓ **before** the single clip); ``buffers``
    are frozen state that the loss reads but nobody differentiates (nor clips)."""
    if x.shape[0] == 0:
        return {k: torch.zeros_like(v) for k, v in params.items()}
    extra = () if noise is None else (noise,)
    g = vmap(grad(_example_loss(model, buffers)), in_dims=(None, 0, 0, *(0 for _ in extra)))(params, x, y, *extra)
    norms = torch.sqrt(sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in g.values()))  # type: ignore[arg-type]
    scale = (clip / (norms + 1e-12)).clamp(max=1.0)
    return {k: (v * scale.view(-1, *([1] * (v.ndim - 1)))).sum(0) for k, v in g.items()}


@register_client_task("dpsgd.clipped_sum")
def dpsgd_clipped_sum(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """Poisson-sample own records at rate ``q`` (the client's protective coins, :meth:`ClientContext.uniform`:
    its own secret key in secure mode), return the sum of per-example gradients clipped to ``clip``: a zero
    vector when nothing was sampled, never a count (spec §1.3).

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


@register_client_task("dpsgd.sampled_clipped_sum")
def sampled_clipped_sum(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """``dpsgd.clipped_sum`` as in round ``config["step"]``: the same Poisson coins and clipped per-example gradient
    sum a DP-SGD round of that number computes, for a pipeline's ``ε = ∞`` reference, whose server adds no noise
    (:meth:`~sstq_fl.gen.runner.DPRunner.non_private_sum`, recorded as non-private); naming the round keeps
    reproducible runs sampling afresh each step."""
    step = ClientContext(ctx.cid, ctx.x, ctx.y, ctx.seed, int(config["step"]), ctx.device, ctx.randomness)
    return dpsgd_clipped_sum(step, payload, config)


# ----------------------------------------------------------------------------- additive statistics
@register_client_task("stats.class_sums")
def class_pixel_sums(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """Labelled counts and per-class sums of ``clip_R(x_i)`` (pixels), ``R = √(bound² − 1)``:
    each record contributes ``(e_y, clip_R(x)⊗e_y)`` of norm ≤ ``bound``."""
    r = float(np.sqrt(float(config["bound"]) ** 2 - 1.0))
    x = ctx.x.reshape(len(ctx.x), -1).astype(np.float64)
    x = clip_rows(x, r)
    counts = np.bincount(ctx.y, minlength=10).astype(np.float64)
    sums = np.zeros((10, x.shape[1]))
    np.add.at(sums, ctx.y, x)
    return {"counts": counts, "sums": sums}


# ----------------------------------------------------------------------------- record-local releases
@register_client_task("labels.randomized_response")
def label_randomized_response(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """k-ary randomized response on each own record's label (Warner 1965): keep ``y`` with
    probability ``e^ε/(e^ε+k−1)``, else report one of the other ``k−1`` labels uniformly, so
    every output has probability ratio ≤ ``e^ε`` between any two inputs.  The coins are the client's
    protective draws (:meth:`ClientContext.uniform`, :meth:`ClientContext.randint`)."""
    eps, k = float(config["epsilon"]), int(config.get("classes", 10))
    keep = ctx.uniform("label-rr", len(ctx.y)) < np.exp(eps) / (np.exp(eps) + k - 1)
    shift = ctx.randint("label-rr", len(ctx.y), 1, k)
    return {"labels": np.where(keep, ctx.y, (ctx.y + shift) % k).astype(np.int64)}


# ----------------------------------------------------------------------------- DP-MEPF
_EXTRACTORS: dict[tuple[str, str, str], FeatureExtractor] = {}  # (sha256 of the weights, profile, device) -> Φ


def _extractor(payload: Arrays, profile: str, device: str) -> FeatureExtractor:
    """The broadcast Φ, rebuilt once per process (a client answers many requests with the same Φ)."""
    state = {k[4:]: v for k, v in sorted(payload.items()) if k.startswith("phi/")}
    h = hashlib.sha256()
    for v in state.values():
        h.update(np.ascontiguousarray(v).tobytes())
    key = (h.hexdigest(), profile, device)
    if key not in _EXTRACTORS:
        fx = FeatureExtractor(profile)
        fx.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
        _EXTRACTORS.clear()
        _EXTRACTORS[key] = fx.to(torch.device(device)).eval().requires_grad_(False)
    return _EXTRACTORS[key]


def extractor_payload(fx: nn.Module) -> Arrays:
    """Φ's state dict as broadcast arrays (``phi/<name>``): public weights, no pickle."""
    return {f"phi/{k}": v.detach().cpu().numpy() for k, v in fx.state_dict().items()}


@register_client_task("mepf.class_sums")
def mepf_class_sums(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """DP-MEPF's labelled statistics on the client (spec §4.3 federated mapping): apply the
    broadcast public Φ, unit-normalise the moments per record, and sum per class."""
    from .mepf import embedded_class_sums

    fx = _extractor(payload, str(config["profile"]), ctx.device)
    moments = tuple(int(m) for m in str(config["moments"]).split(","))
    counts, sums = embedded_class_sums(fx, ctx.x, ctx.y, moments)
    return {"counts": counts.cpu().numpy(), "sums": sums.cpu().numpy()}


# ----------------------------------------------------------------------------- pipelines' own tasks
# Imported last (they build on the models and tasks above) so that every client process that loads the
# built-in tasks also registers DP-VQG's ("vqg.tokens", model "vqg-tokenizer").
from .straightdp import tasks as _straightdp_tasks  # noqa: E402, F401  (StraightDP's tasks and "straightdp-flow")
from .vqg import tasks as _vqg_tasks  # noqa: E402, F401
