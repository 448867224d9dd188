"""StraightDP's conditional flow model: flow matching with a dual-stream MM-DiT on 28×28 grey images, or on the
2 × 4 × 4 latents of a frozen public autoencoder (:mod:`~sstq_fl.gen.straightdp.autoencoder`; ``space="latent"``).

Flow matching (Lipman, Chen, Ben-Hamu, Nickel & Le, "Flow Matching for Generative Modeling", ICLR 2023) on the
straight path of rectified flow (Liu, Gong & Liu, "Flow Straight and Fast", ICLR 2023), **t = 0 the noise end**:

    x_t = (1 − t)·ξ + t·z,   ξ ~ N(0, I),   target v = dx_t/dt = z − ξ,
    ℓ(z, y) = E_{t, ξ, drop} mean_pixels ‖v_θ(x_t, t, c) − (z − ξ)‖²,

with c the caption of y, replaced by the null caption with probability p_uncond = 0.1 (classifier-free guidance, Ho &
Salimans, "Classifier-Free Diffusion Guidance", NeurIPS 2021 Workshop on Deep Generative Models).  Sampling integrates
dx/dt = v_u + w(v_c − v_u), w = 1.5, by Euler steps from t = 0 to 1 (25 full, 10 CPU).

**Noise multiplicity:** one example's loss is the mean over its own M (t, ξ, drop) draws, computed
*inside* the per-example loss (:meth:`FlowModel.forward`), so DP-SGD clips that average once.

Captions (our choice): the bytes ``b"class y"`` padded with byte 0 to length 8 (the null caption is all padding), encoded
by a byte embedding + learned positions + 2 pre-LN transformer layers (width 64).  The encoder is trained in
public pretraining, then frozen into the buffer ``caption_table`` (:meth:`FlowModel.freeze_captions`), so DP-SGD
neither clips nor updates it.

Backbone: MM-DiT (Esser et al., "Scaling Rectified Flow Transformers for High-Resolution Image Synthesis", ICML 2024)
with DiT's adaLN-Zero (Peebles & Xie, "Scalable Diffusion Models with Transformers", ICCV 2023):

* image stream: patchified tokens (patch p → (28/p)² tokens; latents: patch 1 → 16 tokens of 2 channels), linear
  embedding + learned positions, width D;
  caption stream: ``context_in(caption tokens)``, width 64 (kept at 64 in the residual stream).
* **Joint attention with per-stream weights**: each stream has its own adaLN, QKV, output projection and MLP.
  The caption stream's QKV projects 64 → D, i.e. **the caption is projected to the image width inside attention**
  (heads = the image heads, head dim D/heads); softmax runs over the concatenated 49 (or 16) + 8 keys and each
  stream's slice of the result returns through its own D → width output projection.  As in SD3's last block,
  the caption stream of the last block only supplies keys/values (its update would be discarded).
* adaLN-Zero: c = MLP(sinusoid(1000·t)) + MLP(mean_l e_l) (pooled caption: our choice); per stream and block
  (shift, scale, gate) × 2 = Linear(SiLU(c)), zero-initialised; final layer adaLN (shift, scale) + linear to the
  C·p² patch values (zero-initialised), unpatchified to ``[n, 1, 28, 28]`` (latents: ``[n, 2, 4, 4]``).

**Low-B₀ variant** (``low_b0=True``, part of the architecture from the first pretraining step):

1. stream-norm clamp: every token of both streams is h·min(1, B₀/‖h‖) (B₀ = 16) at every block input and at the
   input of the final layer;
2. late injection: cross-modal attention exists only in the last ℓ₀ = 1 block(s), so it is exactly zero
   elsewhere, and c = MLP(sinusoid(1000·t)) only (no pooled caption; our choice);
3. decoupled attention: h ← h + g ⊙ F(h̃) + G(h̃, ẽ) with separate softmaxes, F = self-attention inside the
   stream, G = cross-attention from the stream's queries to the other stream's keys/values (g: adaLN gate);
4. G's output projection is spectrally capped, W ← W / max(1, σ_max(W)/s), s = 1 (the cap's target is our choice),
   with σ_max exact (:func:`torch.linalg.matrix_norm`, ord 2).  G has no bias and no gate, so ‖G(h̃, ẽ)‖ ≤ s·‖attention output‖.

Everything works under ``torch.func.vmap(grad(functional_call))`` per example: no BatchNorm, no dropout, no
in-place ops, attention written as matmul + softmax, no data-dependent Python control flow.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, cast

import torch
from torch import Tensor, nn

from ..dpsgd import register_model
from ..runner import Scalar
from ..tensors import seeded
from .blocks import (
    BOOLS,
    FREQ_DIM,
    AdaLN,
    CaptionEncoder,
    FlowConfig,
    MMDiTBlock,
    SpectralCappedLinear,
    clamp_tokens,
    modulate,
    patchify,
    timestep_embedding,
    unpatchify,
    zero_init,
)


def to_model_space(x: Any) -> Any:
    """Images in [0, 1] (the records as stored) → StraightDP's pixel scale [−1, 1] (our choice): 2x − 1."""
    return 2 * x - 1


def to_pixels(x: Any) -> Any:
    """The inverse of :func:`to_model_space`: (x + 1)/2 (samples back to [0, 1] for evaluation; not clamped)."""
    return (x + 1) / 2


def interpolate(xi: Tensor, z: Tensor, t: Tensor) -> Tensor:
    """The straight path x_t = (1 − t)·ξ + t·z (t = 0 noise, t = 1 data), t ``[n]`` broadcast over ``[n, ...]``."""
    tb = t.reshape(-1, *([1] * (z.ndim - 1)))
    return (1 - tb) * xi + tb * z


def flow_matching_loss(v: Tensor, z: Tensor, xi: Tensor) -> Tensor:
    """Per-row mean over pixels of ‖v − (z − ξ)‖² (Lipman et al., ICLR 2023; Liu, Gong & Liu, ICLR 2023):
    ``[n, ...]`` → ``[n]``."""
    return (v - (z - xi)).pow(2).reshape(v.shape[0], -1).mean(1)


class FlowModel(nn.Module):
    """v_θ(x, t, caption) (module docstring).  ``model(x, y, noise)`` is the per-example flow-matching loss ``[n]``
    (``returns_loss``, the contract of :func:`sstq_fl.gen.client_tasks.per_example_clipped_sum`).

    ``frozen_captions=True`` builds the DP-SGD model: a zero ``caption_table`` buffer in place of the encoder (to
    be loaded from a frozen state dict)."""

    returns_loss = True

    def __init__(self, cfg: FlowConfig | None = None, frozen_captions: bool = False):
        super().__init__()
        self.cfg = cfg = cfg or FlowConfig.cpu()
        w, cw, p = cfg.width, cfg.caption_width, cfg.patch
        self.patch_embed = nn.Linear(cfg.shape[0] * p * p, w)
        self.pos = nn.Parameter(0.02 * torch.randn(1, cfg.grid ** 2, w))
        self.time_mlp = nn.Sequential(nn.Linear(FREQ_DIM, w), nn.SiLU(), nn.Linear(w, w))
        self.pool_mlp = None if cfg.low_b0 else nn.Sequential(nn.Linear(cw, w), nn.SiLU(), nn.Linear(w, w))
        self.context_in = nn.Linear(cw, cw)
        late = cfg.depth - cfg.late_blocks
        self.blocks = nn.ModuleList(MMDiTBlock(cfg, last=i == cfg.depth - 1, cross=not cfg.low_b0 or i >= late)
                                    for i in range(cfg.depth))
        self.final_ada = AdaLN(w, w, 2)
        self.final_norm = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
        self.final = zero_init(nn.Linear(w, cfg.shape[0] * p * p))
        self.captions: CaptionEncoder | None = None if frozen_captions else CaptionEncoder(cfg)
        if frozen_captions:
            self.register_buffer("caption_table", torch.zeros(cfg.classes + 1, cfg.caption_len, cw))

    # ----------------------------------------------------------------------------------------- captions
    @torch.no_grad()
    def freeze_captions(self) -> FlowModel:
        """Replace the caption encoder by the buffer ``caption_table`` = its output for every caption
        ``[classes + 1, L, 64]``: afterwards no caption-encoder parameter is in ``named_parameters()`` (DP-SGD
        neither clips nor updates it) and ``state_dict()`` carries the table.  Idempotent; returns ``self``."""
        if self.captions is None:
            return self
        table = self.captions.table().detach().clone()
        self.captions = None
        self.register_buffer("caption_table", table)
        return self

    def caption_tokens(self) -> Tensor:
        """Encoded tokens of every caption, ``[classes + 1, L, 64]`` (live encoder, or the frozen table)."""
        if self.captions is not None:
            return self.captions.table()
        return cast(Tensor, self.caption_table)

    def condition(self, t: Tensor, caption: Tensor) -> Tensor:
        """adaLN input c = MLP(sinusoid(1000·t)) + MLP(mean_l e_l); the low-B₀ model uses t only."""
        c = self.time_mlp(timestep_embedding(t))
        if self.pool_mlp is not None:
            c = c + self.pool_mlp(caption.mean(1))
        return c  # type: ignore[no-any-return]

    def cross_projections(self) -> list[SpectralCappedLinear]:
        """The spectrally capped cross-stream output projections (low-B₀ late blocks; none otherwise)."""
        return [m for m in self.modules() if isinstance(m, SpectralCappedLinear)]

    # ----------------------------------------------------------------------------------------- forward
    def _device(self) -> torch.device:
        return next(self.parameters()).device

    def _streams(self, img: Tensor, txt: Tensor, states: list[tuple[Tensor, Tensor]] | None) -> tuple[Tensor, Tensor]:
        if self.cfg.low_b0:
            img, txt = clamp_tokens(img, self.cfg.b0), clamp_tokens(txt, self.cfg.b0)
        if states is not None:
            states.append((img, txt))
        return img, txt

    def _run(self, x: Tensor, t: Tensor, labels: Tensor, states: list[tuple[Tensor, Tensor]] | None = None) -> Tensor:
        """Patchify → blocks (streams clamped at every block input in low-B₀) → adaLN final layer → unpatchify."""
        caption = self.caption_tokens()[labels]
        c = self.condition(t.to(x.dtype), caption)
        img = self.patch_embed(patchify(x, self.cfg.patch)) + self.pos
        txt = self.context_in(caption)
        for block in self.blocks:
            img, txt = self._streams(img, txt, states)
            img, txt = block(img, txt, c)
        img, txt = self._streams(img, txt, states)
        shift, scale = self.final_ada(c)
        return unpatchify(self.final(modulate(self.final_norm(img), shift, scale)), self.cfg.patch, self.cfg.shape)

    def _check(self, x: Tensor, t: Tensor, labels: Tensor) -> None:
        n, shape = x.shape[0], self.cfg.shape
        if tuple(x.shape[1:]) != shape or tuple(t.shape) != (n,) or tuple(labels.shape) != (n,):
            raise ValueError(f"expected x [n, {', '.join(map(str, shape))}], t [n], labels [n]; got {tuple(x.shape)}, "
                             f"{tuple(t.shape)}, {tuple(labels.shape)}")
        if labels.is_floating_point():
            raise ValueError("labels must be integers (null caption = classes)")

    def velocity(self, x: Tensor, t: Tensor, labels: Tensor) -> Tensor:
        """v_θ(x_t, t, caption(labels)): x ``[n, *cfg.shape]`` (``[n, 1, 28, 28]`` or ``[n, 2, 4, 4]``), t ``[n]``,
        labels ``[n]`` (``classes`` = null)."""
        self._check(x, t, labels)
        return self._run(x, t, labels.long())

    def stream_states(self, x: Tensor, t: Tensor, labels: Tensor) -> list[tuple[Tensor, Tensor]]:
        """``(image, caption)`` tokens at each block input and at the final layer's input (depth + 1 pairs),
        after the low-B₀ clamp: the inspection hook for tests."""
        self._check(x, t, labels)
        states: list[tuple[Tensor, Tensor]] = []
        self._run(x, t, labels.long(), states)
        return states

    def draw_noise(self, n: int, generator: torch.Generator) -> Tensor:
        """Each example's M draws ``[n, M, 2 + D]`` (D = 784 or 32): column 0 t ~ U[t_min, t_max], column 1 the null-caption flag
        (1 w.p. p_uncond), columns 2: ξ ~ N(0, I); all from ``generator``, moved to the model's device."""
        cfg, dev = self.cfg, generator.device
        t = cfg.t_min + (cfg.t_max - cfg.t_min) * torch.rand(n, cfg.multiplicity, 1, generator=generator, device=dev)
        flag = (torch.rand(n, cfg.multiplicity, 1, generator=generator, device=dev) < cfg.p_uncond).float()
        xi = torch.randn(n, cfg.multiplicity, cfg.dim, generator=generator, device=dev)
        return torch.cat([t, flag, xi], dim=-1).to(self._device())

    def record_to_model(self, x: Tensor) -> Tensor:
        """A record as stored → the flow's data ``z``: pixels ``2x − 1`` (:func:`to_model_space`); latents unchanged
        (the client encoded them with the frozen public encoder)."""
        return to_model_space(x) if self.cfg.space == "pixel" else x

    def forward(self, x: Tensor, y: Tensor, noise: Tensor) -> Tensor:
        """Per-example loss ``[n]``: (1/M)·Σ_m mean_values ‖v_θ(x_t, t_m, c_m) − (z − ξ_m)‖², z =
        :meth:`record_to_model` of ``x`` (images in [0, 1] → 2x − 1; latents as they are),
        x_t = (1 − t_m)ξ_m + t_m·z, c_m = null caption where flag_m = 1.  **The multiplicity average
        over the M (t, ξ) draws is inside the per-example loss, before any clipping** (average over M
        draws, then clip once)."""
        n, cols, shape, dim = x.shape[0], self.cfg.noise_cols, self.cfg.shape, self.cfg.dim
        if noise.ndim != 3 or noise.shape[0] != n or noise.shape[2] != cols or tuple(y.shape) != (n,):
            raise ValueError(f"expected y [{n}] and noise [{n}, M, {cols}], got {tuple(y.shape)}, "
                             f"{tuple(noise.shape)}")
        m = noise.shape[1]
        noise = noise.to(x.dtype)
        t, xi = noise[..., 0].reshape(n * m), noise[..., 2:].reshape(n * m, *shape)
        z = self.record_to_model(x).reshape(n, 1, dim).expand(n, m, dim).reshape(n * m, *shape)
        yy = y.long().reshape(n, 1).expand(n, m).reshape(n * m)
        labels = torch.where(noise[..., 1].reshape(n * m) > 0.5, torch.full_like(yy, self.cfg.null_label), yy)
        v = self._run(interpolate(xi, z, t), t, labels)
        return flow_matching_loss(v, z, xi).reshape(n, m).mean(1)


def build_flow(cfg: FlowConfig | None = None, seed: int = 0, frozen_captions: bool = False) -> FlowModel:
    """A freshly initialised flow model from ``seed`` (a private CPU RNG; the global RNG is untouched)."""
    return seeded(lambda: FlowModel(cfg, frozen_captions), seed)


def _coerce(kind: str, name: str, value: Scalar) -> Any:
    if kind == "str":
        return str(value)
    if kind == "bool":
        if isinstance(value, str):
            if value.strip().lower() not in BOOLS:
                raise ValueError(f"{name}: expected a boolean, got {value!r}")
            return BOOLS[value.strip().lower()]
        return bool(value)
    if kind == "int":
        f = float(value)
        if not f.is_integer():
            raise ValueError(f"{name}: expected an integer, got {value!r}")
        return int(f)
    return float(value)


@register_model("straightdp-flow")
def _flow_model(config: dict[str, Scalar]) -> nn.Module:
    """``dpsgd.clipped_sum`` builder: ``config["profile"]`` (cpu/full, default cpu) plus any :class:`FlowConfig`
    field as a scalar (booleans may be strings); always ``frozen_captions=True`` (a client never trains the
    caption encoder; the table arrives with the broadcast buffers)."""
    over = {f.name: _coerce(str(f.type), f.name, config[f.name]) for f in fields(FlowConfig) if f.name in config}
    return FlowModel(FlowConfig.profile(str(config.get("profile", "cpu")), **over), frozen_captions=True)
