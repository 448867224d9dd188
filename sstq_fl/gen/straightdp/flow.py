"""StraightDP's conditional flow model: flow matching with a dual-stream MM-DiT on 28×28 grey images (spec §3.1,
§3.5, §3.7).

Flow matching (Lipman, Chen, Ben-Hamu, Nickel & Le, "Flow Matching for Generative Modeling", ICLR 2023) on the
straight path of rectified flow (Liu, Gong & Liu, "Flow Straight and Fast", ICLR 2023), **t = 0 the noise end**:

    x_t = (1 − t)·ξ + t·z,   ξ ~ N(0, I),   target v = dx_t/dt = z − ξ,
    ℓ(z, y) = E_{t, ξ, drop} mean_pixels ‖v_θ(x_t, t, c) − (z − ξ)‖²,

with c the caption of y, replaced by the null caption with probability p_uncond = 0.1 (classifier-free guidance,
Ho & Salimans, "Classifier-Free Diffusion Guidance", 2022).  Sampling integrates dx/dt = v_u + w(v_c − v_u),
w = 1.5, by Euler steps from t = 0 to 1 (25 full, 10 CPU).

**Noise multiplicity (spec §3.4):** one example's loss is the mean over its own M (t, ξ, drop) draws, computed
*inside* the per-example loss (:meth:`FlowModel.forward`), so DP-SGD clips that average once.

Captions [R]: the bytes ``b"class y"`` padded with byte 0 to length 8 (the null caption is all padding), encoded
by a byte embedding + learned positions + 2 pre-LN transformer layers (width 64).  The encoder is trained in
public pretraining, then frozen into the buffer ``caption_table`` (:meth:`FlowModel.freeze_captions`), so DP-SGD
neither clips nor updates it.

Backbone: MM-DiT (Esser et al., "Scaling Rectified Flow Transformers for High-Resolution Image Synthesis", 2024)
with DiT's adaLN-Zero (Peebles & Xie, "Scalable Diffusion Models with Transformers", ICCV 2023):

* image stream: patchified tokens (patch p → (28/p)² tokens), linear embedding + learned positions, width D;
  caption stream: ``context_in(caption tokens)``, width 64 (kept at 64 in the residual stream).
* **Joint attention with per-stream weights**: each stream has its own adaLN, QKV, output projection and MLP.
  The caption stream's QKV projects 64 → D, i.e. **the caption is projected to the image width inside attention**
  (heads = the image heads, head dim D/heads); softmax runs over the concatenated 49 (or 16) + 8 keys and each
  stream's slice of the result returns through its own D → width output projection.  As in SD3's last block,
  the caption stream of the last block only supplies keys/values (its update would be discarded).
* adaLN-Zero: c = MLP(sinusoid(1000·t)) + MLP(mean_l e_l) (pooled caption [R]); per stream and block
  (shift, scale, gate) × 2 = Linear(SiLU(c)), zero-initialised; final layer adaLN (shift, scale) + linear to the
  p² patch pixels (zero-initialised), unpatchified to ``[n, 1, 28, 28]``.

**Low-B₀ variant** (``low_b0=True``, part of the architecture from the first pretraining step, spec §3.7):

1. stream-norm clamp: every token of both streams is h·min(1, B₀/‖h‖) (B₀ = 16) at every block input and at the
   input of the final layer;
2. late injection: cross-modal attention exists only in the last ℓ₀ = 1 block(s), so it is exactly zero
   elsewhere, and c = MLP(sinusoid(1000·t)) only (no pooled caption) [R];
3. decoupled attention: h ← h + g ⊙ F(h̃) + G(h̃, ẽ) with separate softmaxes, F = self-attention inside the
   stream, G = cross-attention from the stream's queries to the other stream's keys/values (g: adaLN gate);
4. G's output projection is spectrally capped, W ← W / max(1, σ_max(W)/s), s = 1 [R target], with σ_max exact
   (:func:`torch.linalg.matrix_norm`, ord 2).  G has no bias and no gate, so ‖G(h̃, ẽ)‖ ≤ s·‖attention output‖.

Everything works under ``torch.func.vmap(grad(functional_call))`` per example: no BatchNorm, no dropout, no
in-place ops, attention written as matmul + softmax, no data-dependent Python control flow.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..mepf import _as_images, _seeded
from ..runner import Scalar
from ..tasks import register_model

SIDE = 28
PIXELS = SIDE * SIDE
NOISE_COLS = 2 + PIXELS
VOCAB = 256
PAD = 0
FREQ_DIM = 256
NORM_EPS = 1e-12
_POSITIVE_INTS = ("width", "depth", "heads", "patch", "caption_width", "caption_len", "caption_layers",
                  "caption_heads", "mlp_ratio", "late_blocks", "multiplicity", "classes", "sample_steps")
_BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


@dataclass(frozen=True)
class FlowConfig:
    """Flow-model hyperparameters (spec §3.5, §3.7).

    ``width``/``depth``/``heads``/``patch``: the image stream; ``caption_*``: the caption encoder and stream;
    ``low_b0``/``b0``/``late_blocks``/``spectral_cap``: the low-B₀ variant (B₀, ℓ₀, s); ``p_uncond``: p(null
    caption) in training; ``multiplicity``: M (t, ξ) draws per example; ``t_min``/``t_max``: t ~ U[t_min, t_max];
    ``classes``: labels 0..classes−1 (null = classes); ``sample_steps``/``cfg_scale``: Euler steps and w."""

    width: int = 64
    depth: int = 2
    heads: int = 2
    patch: int = 7
    caption_width: int = 64
    caption_len: int = 8
    caption_layers: int = 2
    caption_heads: int = 2
    mlp_ratio: int = 4
    low_b0: bool = False
    b0: float = 16.0
    late_blocks: int = 1
    spectral_cap: float = 1.0
    p_uncond: float = 0.1
    multiplicity: int = 1
    t_min: float = 0.0
    t_max: float = 1.0
    classes: int = 10
    sample_steps: int = 10
    cfg_scale: float = 1.5

    def __post_init__(self) -> None:
        for name in _POSITIVE_INTS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"FlowConfig.{name} must be a positive integer, got {v!r}")
        if SIDE % self.patch or self.width % self.heads or self.caption_width % self.caption_heads:
            raise ValueError(f"need patch | 28, heads | width, caption_heads | caption_width; got {self.patch}, "
                             f"{self.width}/{self.heads}, {self.caption_width}/{self.caption_heads}")
        if not (isinstance(self.low_b0, bool) and self.late_blocks <= self.depth):
            raise ValueError(f"need a bool low_b0 and late_blocks <= depth; got {self.low_b0!r}, {self.late_blocks}")
        if not (0 <= self.t_min < self.t_max <= 1 and 0 <= self.p_uncond < 1):
            raise ValueError(f"need 0 <= t_min < t_max <= 1 and 0 <= p_uncond < 1; got {self.t_min}, {self.t_max}, "
                             f"{self.p_uncond}")
        if not (0 < self.b0 < math.inf and 0 < self.spectral_cap < math.inf and 0 <= self.cfg_scale < math.inf):
            raise ValueError(f"need finite b0 > 0, spectral_cap > 0, cfg_scale >= 0; got {self.b0}, "
                             f"{self.spectral_cap}, {self.cfg_scale}")
        if len(f"class {self.classes - 1}") > self.caption_len:
            raise ValueError(f"caption 'class {self.classes - 1}' does not fit caption_len = {self.caption_len}")

    @property
    def null_label(self) -> int:
        """The null caption's label (unconditional branch of CFG), ``classes``."""
        return self.classes

    @property
    def grid(self) -> int:
        """Patches per side, 28/p."""
        return SIDE // self.patch

    @classmethod
    def cpu(cls, **overrides: Any) -> FlowConfig:
        """CPU profile (spec §3.5): width 64, depth 2, 2 heads, patch 7 (16 tokens), 10 Euler steps."""
        return replace(cls(width=64, depth=2, heads=2, patch=7, sample_steps=10), **overrides)

    @classmethod
    def full(cls, **overrides: Any) -> FlowConfig:
        """Full profile (spec §3.5): width 192, depth 6, 6 heads, patch 4 (49 tokens), 25 Euler steps."""
        return replace(cls(width=192, depth=6, heads=6, patch=4, sample_steps=25), **overrides)

    @classmethod
    def profile(cls, name: str, **overrides: Any) -> FlowConfig:
        """``"cpu"`` or ``"full"``."""
        if name not in ("cpu", "full"):
            raise ValueError(f"unknown flow profile {name!r} (cpu or full)")
        return cls.cpu(**overrides) if name == "cpu" else cls.full(**overrides)


# ----------------------------------------------------------------------------------------------- captions


def caption_table_bytes(classes: int = 10, length: int = 8) -> Tensor:
    """All captions as bytes, ``[classes + 1, length]`` long: row y < classes is ``b"class y"`` padded with byte 0,
    row ``classes`` (the null caption) is all padding (spec §3.5 [R])."""
    rows = [list(f"class {y}".encode()) for y in range(classes)] + [[]]
    if classes < 1 or any(len(r) > length for r in rows):
        raise ValueError(f"captions of {classes} classes do not fit length {length}")
    return torch.tensor([r + [PAD] * (length - len(r)) for r in rows], dtype=torch.long)


def caption_bytes(labels: Tensor, classes: int = 10, length: int = 8) -> Tensor:
    """``[n]`` labels in [0, classes] → ``[n, length]`` caption bytes (``classes`` = the all-zero null caption)."""
    y = _check_labels(labels, classes, allow_null=True)
    return caption_table_bytes(classes, length).to(y.device)[y]


def _check_labels(labels: Tensor, classes: int, allow_null: bool = False) -> Tensor:
    y = torch.as_tensor(labels)
    if y.ndim != 1 or y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(f"labels: expected a 1-D integer tensor, got {tuple(y.shape)} {y.dtype}")
    top = classes + 1 if allow_null else classes
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= top):
        raise ValueError(f"labels must lie in [0, {top})")
    return y.long()


# ----------------------------------------------------------------------------------------------- layers


def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """softmax(QKᵀ/√d)·V over the last two axes (``[..., Lq, d]``, ``[..., Lk, d]``), by matmul + softmax."""
    return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1) @ v


def _split_heads(h: Tensor, heads: int) -> Tensor:
    n, length, d = h.shape
    return h.reshape(n, length, heads, d // heads).transpose(1, 2)


def _merge_heads(a: Tensor) -> Tensor:
    n, heads, length, dh = a.shape
    return a.transpose(1, 2).reshape(n, length, heads * dh)


def clamp_tokens(h: Tensor, b0: float) -> Tensor:
    """The stream-norm clamp h·min(1, B₀/‖h‖) on every token (last axis), spec §3.7; ‖h‖ = √(Σh² + 10⁻¹²)."""
    norm = torch.sqrt(h.pow(2).sum(-1, keepdim=True) + NORM_EPS)
    return h * torch.clamp(b0 / norm, max=1.0)


def modulate(h: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """adaLN: h·(1 + scale) + shift, per example broadcast over the tokens (DiT)."""
    return h * (1 + scale[:, None]) + shift[:, None]


def timestep_embedding(t: Tensor, dim: int = FREQ_DIM, max_period: float = 10000.0) -> Tensor:
    """DiT's sinusoidal embedding of 1000·t: [cos(1000t·ω_k), sin(1000t·ω_k)], ω_k = max_period^(−k/(dim/2))."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=t.dtype, device=t.device) / half)
    args = 1000.0 * t[:, None] * freqs
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def patchify(x: Tensor, patch: int) -> Tensor:
    """``[n, 1, 28, 28]`` → ``[n, (28/p)², p²]`` row-major patches."""
    n, g = x.shape[0], SIDE // patch
    return x.reshape(n, g, patch, g, patch).permute(0, 1, 3, 2, 4).reshape(n, g * g, patch * patch)


def unpatchify(z: Tensor, patch: int) -> Tensor:
    """Inverse of :func:`patchify`: ``[n, (28/p)², p²]`` → ``[n, 1, 28, 28]``."""
    n, g = z.shape[0], SIDE // patch
    return z.reshape(n, g, g, patch, patch).permute(0, 1, 3, 2, 4).reshape(n, 1, SIDE, SIDE)


def _mlp(dim: int, ratio: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, ratio * dim), nn.GELU(approximate="tanh"), nn.Linear(ratio * dim, dim))


def _zero(layer: nn.Linear) -> nn.Linear:
    nn.init.zeros_(layer.weight)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


class SpectralCappedLinear(nn.Module):
    """x ↦ x·W̃ᵀ with W̃ = W / max(1, σ_max(W)/s): σ_max(W̃) ≤ s (spec §3.7 item 4), no bias, zero-initialised.

    σ_max is exact (``torch.linalg.matrix_norm(W, 2)``, an SVD) and differentiable, also under ``vmap(grad)``
    with an unbatched W."""

    def __init__(self, in_features: int, out_features: int, cap: float):
        super().__init__()
        self.cap = cap
        self.weight = nn.Parameter(torch.zeros(out_features, in_features))

    def capped_weight(self) -> Tensor:
        """W̃ = W / max(1, σ_max(W)/s)."""
        sigma = torch.linalg.matrix_norm(self.weight, 2)
        return self.weight / torch.clamp(sigma / self.cap, min=1.0)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.capped_weight())


class _AdaLN(nn.Module):
    """adaLN-Zero (Peebles & Xie 2023): ``chunks`` modulation vectors = Linear(SiLU(c)), zero-initialised."""

    def __init__(self, cond_dim: int, dim: int, chunks: int):
        super().__init__()
        self.chunks = chunks
        self.linear = _zero(nn.Linear(cond_dim, chunks * dim))

    def forward(self, c: Tensor) -> list[Tensor]:
        return list(self.linear(F.silu(c)).chunk(self.chunks, dim=-1))


class _EncoderLayer(nn.Module):
    """Pre-LN transformer layer of the caption encoder: h + O(attn(LN h)), then h + MLP(LN h)."""

    def __init__(self, dim: int, heads: int, ratio: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out, self.mlp = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), _mlp(dim, ratio)

    def forward(self, h: Tensor) -> Tensor:
        q, k, v = (_split_heads(z, self.heads) for z in self.qkv(self.norm1(h)).chunk(3, dim=-1))
        h = h + self.out(_merge_heads(attend(q, k, v)))
        return h + self.mlp(self.norm2(h))  # type: ignore[no-any-return]


class CaptionEncoder(nn.Module):
    """Byte embedding (256) + learned positions + ``caption_layers`` transformer layers + LN, width 64 [R].
    No padding mask: the pad byte is an ordinary token (the null caption is all padding)."""

    def __init__(self, cfg: FlowConfig):
        super().__init__()
        d = cfg.caption_width
        self.embed = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(0.02 * torch.randn(1, cfg.caption_len, d))
        self.layers = nn.ModuleList(_EncoderLayer(d, cfg.caption_heads, cfg.mlp_ratio)
                                    for _ in range(cfg.caption_layers))
        self.norm = nn.LayerNorm(d)
        self.register_buffer("ids", caption_table_bytes(cfg.classes, cfg.caption_len), persistent=False)

    def forward(self, ids: Tensor) -> Tensor:
        """Caption bytes ``[n, L]`` → tokens ``[n, L, 64]``."""
        h = self.embed(ids) + self.pos
        for layer in self.layers:
            h = layer(h)
        return self.norm(h)  # type: ignore[no-any-return]

    def table(self) -> Tensor:
        """Tokens of every caption, ``[classes + 1, L, 64]`` (row ``classes`` = null)."""
        return self(cast(Tensor, self.ids))  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------------------------- MM-DiT


_Projected = tuple[Tensor | None, Tensor, Tensor, list[Tensor]]  # (q or None, k, v, adaLN modulations)


class _StreamBlock(nn.Module):
    """One stream's own weights in one MM-DiT block: adaLN-Zero (6 vectors), QKV dim → attention width, the
    output projection(s) back to dim, and the MLP.  ``cross_cap``: a spectrally capped cross projection (low-B₀)."""

    def __init__(self, dim: int, attn_dim: int, cond_dim: int, ratio: int, cross_cap: float | None):
        super().__init__()
        self.ada = _AdaLN(cond_dim, dim, 6)
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.qkv, self.out, self.mlp = nn.Linear(dim, 3 * attn_dim), nn.Linear(attn_dim, dim), _mlp(dim, ratio)
        self.cross_out = None if cross_cap is None else SpectralCappedLinear(attn_dim, dim, cross_cap)

    def pre(self, h: Tensor, c: Tensor, heads: int) -> _Projected:
        """(q, k, v) of the modulated LN(h), split into heads, and the modulation vectors."""
        mods = self.ada(c)
        q, k, v = (_split_heads(z, heads) for z in self.qkv(modulate(self.norm1(h), mods[0], mods[1])).chunk(3, -1))
        return q, k, v, mods

    def post(self, h: Tensor, a_self: Tensor, a_cross: Tensor | None, mods: list[Tensor]) -> Tensor:
        """h ← h + g₁⊙O(a_self) [+ O_cross(a_cross)];  h ← h + g₂⊙MLP(modulated LN h)."""
        upd = mods[2][:, None] * self.out(_merge_heads(a_self))
        if a_cross is not None and self.cross_out is not None:
            upd = upd + self.cross_out(_merge_heads(a_cross))
        h = h + upd
        return h + mods[5][:, None] * self.mlp(modulate(self.norm2(h), mods[3], mods[4]))


class _StreamKV(nn.Module):
    """The caption stream of the last block: keys and values only (SD3's last context block)."""

    def __init__(self, dim: int, attn_dim: int, cond_dim: int):
        super().__init__()
        self.ada = _AdaLN(cond_dim, dim, 2)
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.kv = nn.Linear(dim, 2 * attn_dim)

    def pre(self, h: Tensor, c: Tensor, heads: int) -> _Projected:
        mods = self.ada(c)
        k, v = (_split_heads(z, heads) for z in self.kv(modulate(self.norm1(h), mods[0], mods[1])).chunk(2, -1))
        return None, k, v, mods


class MMDiTBlock(nn.Module):
    """One dual-stream block (Esser et al. 2024): joint attention over the concatenated tokens, or (low-B₀)
    decoupled self/cross attention with cross-attention only when ``cross`` (module docstring)."""

    def __init__(self, cfg: FlowConfig, last: bool, cross: bool):
        super().__init__()
        self.heads, self.decoupled, self.cross = cfg.heads, cfg.low_b0, cross
        cap = cfg.spectral_cap if cfg.low_b0 and cross else None
        w, cw = cfg.width, cfg.caption_width
        self.img = _StreamBlock(w, w, w, cfg.mlp_ratio, cap)
        self.txt: _StreamBlock | _StreamKV = _StreamKV(cw, w, w) if last else _StreamBlock(cw, w, w, cfg.mlp_ratio, cap)

    def forward(self, img: Tensor, txt: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        pi, pt = self.img.pre(img, c, self.heads), self.txt.pre(txt, c, self.heads)
        return self._decoupled(img, txt, pi, pt) if self.decoupled else self._joint(img, txt, pi, pt)

    def _joint(self, img: Tensor, txt: Tensor, pi: _Projected, pt: _Projected) -> tuple[Tensor, Tensor]:
        """One softmax over [image; caption] keys; each stream's slice leaves through its own projection."""
        k, v = torch.cat([pi[1], pt[1]], dim=2), torch.cat([pi[2], pt[2]], dim=2)
        q = torch.cat([q for q in (pi[0], pt[0]) if q is not None], dim=2)
        a, n_img = attend(q, k, v), img.shape[1]
        img_out = self.img.post(img, a[:, :, :n_img], None, pi[3])
        if isinstance(self.txt, _StreamBlock):
            txt = self.txt.post(txt, a[:, :, n_img:], None, pt[3])
        return img_out, txt

    def _decoupled(self, img: Tensor, txt: Tensor, pi: _Projected, pt: _Projected) -> tuple[Tensor, Tensor]:
        """h ← h + g⊙F(h) + G(h, e): separate self (F) and cross (G) softmaxes; G only if ``cross``."""
        qi, qt = pi[0], pt[0]
        assert qi is not None
        cross_i = attend(qi, pt[1], pt[2]) if self.cross else None
        img_out = self.img.post(img, attend(qi, pi[1], pi[2]), cross_i, pi[3])
        if isinstance(self.txt, _StreamBlock) and qt is not None:
            cross_t = attend(qt, pi[1], pi[2]) if self.cross else None
            txt = self.txt.post(txt, attend(qt, pt[1], pt[2]), cross_t, pt[3])
        return img_out, txt


# ----------------------------------------------------------------------------------------------- the model


def to_model_space(x: Any) -> Any:
    """Images in [0, 1] (the records as stored) → StraightDP's pixel scale [−1, 1] (spec §1.1 [R]): 2x − 1."""
    return 2 * x - 1


def to_pixels(x: Any) -> Any:
    """The inverse of :func:`to_model_space`: (x + 1)/2 (samples back to [0, 1] for evaluation; not clamped)."""
    return (x + 1) / 2


def interpolate(xi: Tensor, z: Tensor, t: Tensor) -> Tensor:
    """The straight path x_t = (1 − t)·ξ + t·z (t = 0 noise, t = 1 data), t ``[n]`` broadcast over ``[n, ...]``."""
    tb = t.reshape(-1, *([1] * (z.ndim - 1)))
    return (1 - tb) * xi + tb * z


def flow_matching_loss(v: Tensor, z: Tensor, xi: Tensor) -> Tensor:
    """Per-row mean over pixels of ‖v − (z − ξ)‖² (Lipman et al. 2023; Liu et al. 2023): ``[n, ...]`` → ``[n]``."""
    return (v - (z - xi)).pow(2).reshape(v.shape[0], -1).mean(1)


class FlowModel(nn.Module):
    """v_θ(x, t, caption) (module docstring).  ``model(x, y, noise)`` is the per-example flow-matching loss ``[n]``
    (``returns_loss``, the contract of :func:`sstq_fl.gen.tasks.per_example_clipped_sum`).

    ``frozen_captions=True`` builds the DP-SGD model: a zero ``caption_table`` buffer in place of the encoder (to
    be loaded from a frozen state dict)."""

    returns_loss = True

    def __init__(self, cfg: FlowConfig | None = None, frozen_captions: bool = False):
        super().__init__()
        self.cfg = cfg = cfg or FlowConfig.cpu()
        w, cw, p = cfg.width, cfg.caption_width, cfg.patch
        self.patch_embed = nn.Linear(p * p, w)
        self.pos = nn.Parameter(0.02 * torch.randn(1, cfg.grid ** 2, w))
        self.time_mlp = nn.Sequential(nn.Linear(FREQ_DIM, w), nn.SiLU(), nn.Linear(w, w))
        self.pool_mlp = None if cfg.low_b0 else nn.Sequential(nn.Linear(cw, w), nn.SiLU(), nn.Linear(w, w))
        self.context_in = nn.Linear(cw, cw)
        late = cfg.depth - cfg.late_blocks
        self.blocks = nn.ModuleList(MMDiTBlock(cfg, last=i == cfg.depth - 1, cross=not cfg.low_b0 or i >= late)
                                    for i in range(cfg.depth))
        self.final_ada = _AdaLN(w, w, 2)
        self.final_norm = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
        self.final = _zero(nn.Linear(w, p * p))
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
        """adaLN input c = MLP(sinusoid(1000·t)) + MLP(mean_l e_l); the low-B₀ model uses t only (spec §3.7)."""
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
        return unpatchify(self.final(modulate(self.final_norm(img), shift, scale)), self.cfg.patch)

    def _check(self, x: Tensor, t: Tensor, labels: Tensor) -> None:
        n = x.shape[0]
        if tuple(x.shape[1:]) != (1, SIDE, SIDE) or tuple(t.shape) != (n,) or tuple(labels.shape) != (n,):
            raise ValueError(f"expected x [n, 1, 28, 28], t [n], labels [n]; got {tuple(x.shape)}, "
                             f"{tuple(t.shape)}, {tuple(labels.shape)}")
        if labels.is_floating_point():
            raise ValueError("labels must be integers (null caption = classes)")

    def velocity(self, x: Tensor, t: Tensor, labels: Tensor) -> Tensor:
        """v_θ(x_t, t, caption(labels)): x ``[n, 1, 28, 28]``, t ``[n]``, labels ``[n]`` (``classes`` = null)."""
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
        """Each example's M draws ``[n, M, 2 + 784]``: column 0 t ~ U[t_min, t_max], column 1 the null-caption flag
        (1 w.p. p_uncond), columns 2: ξ ~ N(0, I); all from ``generator``, moved to the model's device."""
        cfg, dev = self.cfg, generator.device
        t = cfg.t_min + (cfg.t_max - cfg.t_min) * torch.rand(n, cfg.multiplicity, 1, generator=generator, device=dev)
        flag = (torch.rand(n, cfg.multiplicity, 1, generator=generator, device=dev) < cfg.p_uncond).float()
        xi = torch.randn(n, cfg.multiplicity, PIXELS, generator=generator, device=dev)
        return torch.cat([t, flag, xi], dim=-1).to(self._device())

    def forward(self, x: Tensor, y: Tensor, noise: Tensor) -> Tensor:
        """Per-example loss ``[n]``: (1/M)·Σ_m mean_pixels ‖v_θ(x_t, t_m, c_m) − (z − ξ_m)‖², z = 2x − 1 (images ``x`` in
        [0, 1] as stored, the flow in [−1, 1]: :func:`to_model_space`),
        x_t = (1 − t_m)ξ_m + t_m·z, c_m = null caption where flag_m = 1 (spec §3.1).  **The multiplicity average
        over the M (t, ξ) draws is inside the per-example loss, before any clipping** (spec §3.4: average over M
        draws, then clip once)."""
        n = x.shape[0]
        if noise.ndim != 3 or noise.shape[0] != n or noise.shape[2] != NOISE_COLS or tuple(y.shape) != (n,):
            raise ValueError(f"expected y [{n}] and noise [{n}, M, {NOISE_COLS}], got {tuple(y.shape)}, "
                             f"{tuple(noise.shape)}")
        m = noise.shape[1]
        noise = noise.to(x.dtype)
        t, xi = noise[..., 0].reshape(n * m), noise[..., 2:].reshape(n * m, 1, SIDE, SIDE)
        z = to_model_space(x).reshape(n, 1, PIXELS).expand(n, m, PIXELS).reshape(n * m, 1, SIDE, SIDE)
        yy = y.long().reshape(n, 1).expand(n, m).reshape(n * m)
        labels = torch.where(noise[..., 1].reshape(n * m) > 0.5, torch.full_like(yy, self.cfg.null_label), yy)
        v = self._run(interpolate(xi, z, t), t, labels)
        return flow_matching_loss(v, z, xi).reshape(n, m).mean(1)


def build_flow(cfg: FlowConfig | None = None, seed: int = 0, frozen_captions: bool = False) -> FlowModel:
    """A freshly initialised flow model from ``seed`` (a private CPU RNG; the global RNG is untouched)."""
    return _seeded(lambda: FlowModel(cfg, frozen_captions), seed)


def _coerce(kind: str, name: str, value: Scalar) -> Any:
    if kind == "bool":
        if isinstance(value, str):
            if value.strip().lower() not in _BOOLS:
                raise ValueError(f"{name}: expected a boolean, got {value!r}")
            return _BOOLS[value.strip().lower()]
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


def _start_points(n: int, t0: float, x0: Tensor | None, generator: torch.Generator) -> Tensor:
    if x0 is None:
        if t0 != 0.0:
            raise ValueError(f"t0 = {t0} > 0 needs a start x0 (noise is the t = 0 end)")
        return torch.randn(n, 1, SIDE, SIDE, generator=generator, device=generator.device).cpu()
    start = torch.as_tensor(x0).float().cpu()
    if tuple(start.shape) != (n, 1, SIDE, SIDE) or not bool(torch.isfinite(start).all()):
        raise ValueError(f"x0: expected finite [{n}, 1, 28, 28], got {tuple(start.shape)}")
    return start


def sample(model: FlowModel, labels: Tensor, steps: int | None = None, cfg_scale: float | None = None,
           generator: torch.Generator | None = None, t0: float = 0.0, x0: Tensor | None = None,
           batch_size: int = 500) -> Tensor:
    """Images ``[n, 1, 28, 28]`` for ``labels`` ``[n]`` (``classes`` = null: unconditional) by Euler steps of the
    guided field (:func:`guided_velocity`) from t0 to 1, starting at ``x0`` or, at t0 = 0, ξ ~ N(0, I) from
    ``generator`` (default seed 0).  ``steps``/``cfg_scale`` default to the model's config (10 or 25, w = 1.5).
    Runs in eval mode without gradients (mode restored); the result is in the flow's scale [−1, 1]
    (:func:`to_pixels` maps it back), not clamped."""
    cfg = model.cfg
    steps, w = cfg.sample_steps if steps is None else steps, cfg.cfg_scale if cfg_scale is None else cfg_scale
    if steps < 1 or batch_size < 1 or not 0.0 <= t0 < 1.0 or not math.isfinite(w):
        raise ValueError(f"need steps >= 1, batch_size >= 1, 0 <= t0 < 1, finite cfg_scale; got {steps}, "
                         f"{batch_size}, {t0}, {w}")
    y = _check_labels(labels, cfg.classes, allow_null=True)
    start = _start_points(len(y), t0, x0, generator or torch.Generator().manual_seed(0))
    dev, dtype = model._device(), next(model.parameters()).dtype
    was_training = model.training
    model.eval()
    try:
        out = [_euler(model, yb.to(dev), xb.to(dev, dtype), steps, w, t0).cpu()
               for yb, xb in zip(y.split(batch_size), start.split(batch_size))]
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, 1, SIDE, SIDE)


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


def pretrain(x: Tensor, y: Tensor, cfg: FlowConfig | None = None, steps: int = 300, batch: int = 256,
             lr: float = 1e-4, ema: float = 0.999, seed: int = 0, device: str | torch.device = "cpu",
             progress: Callable[[int, int, float], None] | None = None, freeze: bool = True
             ) -> tuple[FlowModel, list[float]]:
    """Public (non-private) pretraining on images ``x`` in [0, 1] with labels ``y`` (spec §3.5): AdamW(lr) on the
    flow-matching loss, ``steps`` batches of ``batch`` drawn uniformly with replacement; init from ``seed``,
    batches and noise from ``torch.Generator(seed)``.  The EMA uses decay min(ema, (1 + s)/(10 + s)) at step s
    (the usual warm-up, so short runs do not return the initialisation).  ``progress(step, steps, loss)`` after
    each step.  Returns the EMA model in eval mode (captions frozen unless ``freeze=False``) and the losses."""
    cfg = cfg or FlowConfig.cpu()
    if steps < 0 or batch < 1 or not lr > 0 or not 0.0 <= ema <= 1.0:
        raise ValueError(f"need steps >= 0, batch >= 1, lr > 0, 0 <= ema <= 1; got {steps}, {batch}, {lr}, {ema}")
    data, labels = _as_images(x, "public images"), _check_labels(y, cfg.classes)
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
