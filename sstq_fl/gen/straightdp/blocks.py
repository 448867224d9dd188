"""The building blocks of StraightDP's flow model: its configuration, byte captions and the dual-stream MM-DiT
block (Esser et al., "Scaling Rectified Flow Transformers for High-Resolution Image Synthesis", ICML 2024) with
DiT's adaLN-Zero (Peebles & Xie, "Scalable Diffusion Models with Transformers", ICCV 2023).  The model itself
and its loss are :mod:`~sstq_fl.gen.straightdp.flow`; the architecture is described there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...config.straightdp import SPACES
from .autoencoder import LATENT_SHAPE

SIDE = 28
PIXELS = SIDE * SIDE
NOISE_COLS = 2 + PIXELS
VOCAB = 256
PAD = 0
FREQ_DIM = 256
NORM_EPS = 1e-12
_POSITIVE_INTS = ("width", "depth", "heads", "patch", "caption_width", "caption_len", "caption_layers",
                  "caption_heads", "mlp_ratio", "late_blocks", "multiplicity", "classes", "sample_steps")
BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


@dataclass(frozen=True)
class FlowConfig:
    """Flow-model hyperparameters.

    ``width``/``depth``/``heads``/``patch``: the image stream; ``caption_*``: the caption encoder and stream;
    ``low_b0``/``b0``/``late_blocks``/``spectral_cap``: the low-B₀ variant (B₀, ℓ₀, s); ``p_uncond``: p(null
    caption) in training; ``multiplicity``: M (t, ξ) draws per example; ``t_min``/``t_max``: t ~ U[t_min, t_max];
    ``classes``: labels 0..classes−1 (null = classes); ``sample_steps``/``cfg_scale``: Euler steps and w;
    ``space``: ``pixel`` (records ``[n, 1, 28, 28]`` in [0, 1], the flow on 2x − 1) or ``latent`` (records are the
    frozen autoencoder's latents ``[n, 2, 4, 4]``, the flow on them as they are; patch 1: 16 tokens)."""

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
    space: str = "pixel"

    def __post_init__(self) -> None:
        for name in _POSITIVE_INTS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"FlowConfig.{name} must be a positive integer, got {v!r}")
        if self.space not in SPACES:
            raise ValueError(f"FlowConfig.space must be one of {SPACES}, got {self.space!r}")
        if self.side % self.patch or self.width % self.heads or self.caption_width % self.caption_heads:
            raise ValueError(f"need patch | {self.side}, heads | width, caption_heads | caption_width; got {self.patch}, "
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
    def shape(self) -> tuple[int, int, int]:
        """One record as the flow sees it: ``(1, 28, 28)`` (pixel) or ``(2, 4, 4)`` (latent)."""
        return (1, SIDE, SIDE) if self.space == "pixel" else LATENT_SHAPE

    @property
    def side(self) -> int:
        return self.shape[1]

    @property
    def dim(self) -> int:
        """Values per record: 784 (pixel) or 32 (latent)."""
        c, h, w = self.shape
        return c * h * w

    @property
    def noise_cols(self) -> int:
        """Columns of one noise draw: t, the null flag and ξ (:meth:`~.flow.FlowModel.draw_noise`)."""
        return 2 + self.dim

    @property
    def grid(self) -> int:
        """Patches per side, side/p."""
        return self.side // self.patch

    @classmethod
    def cpu(cls, **overrides: Any) -> FlowConfig:
        """CPU profile (our reduction): width 64, depth 2, 2 heads, patch 7 (16 tokens), 10 Euler steps."""
        return replace(cls(width=64, depth=2, heads=2, patch=7, sample_steps=10), **overrides)

    @classmethod
    def full(cls, **overrides: Any) -> FlowConfig:
        """Full profile: width 192, depth 6, 6 heads, patch 4 (49 tokens), 25 Euler steps."""
        return replace(cls(width=192, depth=6, heads=6, patch=4, sample_steps=25), **overrides)

    @classmethod
    def profile(cls, name: str, **overrides: Any) -> FlowConfig:
        """``"cpu"`` or ``"full"``; with ``space="latent"`` the patch is 1 (16 latent tokens) unless given."""
        if name not in ("cpu", "full"):
            raise ValueError(f"unknown flow profile {name!r} (cpu or full)")
        if overrides.get("space") == "latent":
            overrides = {"patch": 1, **overrides}
        return cls.cpu(**overrides) if name == "cpu" else cls.full(**overrides)


# ----------------------------------------------------------------------------------------------- captions


def caption_table_bytes(classes: int = 10, length: int = 8) -> Tensor:
    """All captions as bytes, ``[classes + 1, length]`` long: row y < classes is ``b"class y"`` padded with byte 0,
    row ``classes`` (the null caption) is all padding (our choice)."""
    rows = [list(f"class {y}".encode()) for y in range(classes)] + [[]]
    if classes < 1 or any(len(r) > length for r in rows):
        raise ValueError(f"captions of {classes} classes do not fit length {length}")
    return torch.tensor([r + [PAD] * (length - len(r)) for r in rows], dtype=torch.long)


def caption_bytes(labels: Tensor, classes: int = 10, length: int = 8) -> Tensor:
    """``[n]`` labels in [0, classes] → ``[n, length]`` caption bytes (``classes`` = the all-zero null caption)."""
    y = check_class_labels(labels, classes, allow_null=True)
    return caption_table_bytes(classes, length).to(y.device)[y]


def check_class_labels(labels: Tensor, classes: int, allow_null: bool = False) -> Tensor:
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
    """The stream-norm clamp h·min(1, B₀/‖h‖) on every token (last axis); ‖h‖ = √(Σh² + 10⁻¹²)."""
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
    """``[n, C, S, S]`` → ``[n, (S/p)², C·p²]`` row-major patches (channel-major inside a patch)."""
    n, c, side = x.shape[0], x.shape[1], x.shape[2]
    g = side // patch
    return x.reshape(n, c, g, patch, g, patch).permute(0, 2, 4, 1, 3, 5).reshape(n, g * g, c * patch * patch)


def unpatchify(z: Tensor, patch: int, shape: tuple[int, int, int] = (1, SIDE, SIDE)) -> Tensor:
    """Inverse of :func:`patchify`: ``[n, (S/p)², C·p²]`` → ``[n, C, S, S]`` with ``shape = (C, S, S)``."""
    n, (c, side, _) = z.shape[0], shape
    g = side // patch
    return z.reshape(n, g, g, c, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(n, c, side, side)


def _mlp(dim: int, ratio: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, ratio * dim), nn.GELU(approximate="tanh"), nn.Linear(ratio * dim, dim))


def zero_init(layer: nn.Linear) -> nn.Linear:
    nn.init.zeros_(layer.weight)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


class SpectralCappedLinear(nn.Module):
    """x ↦ x·W̃ᵀ with W̃ = W / max(1, σ_max(W)/s): σ_max(W̃) ≤ s, no bias, zero-initialised.

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


class AdaLN(nn.Module):
    """adaLN-Zero (Peebles & Xie 2023): ``chunks`` modulation vectors = Linear(SiLU(c)), zero-initialised."""

    def __init__(self, cond_dim: int, dim: int, chunks: int):
        super().__init__()
        self.chunks = chunks
        self.linear = zero_init(nn.Linear(cond_dim, chunks * dim))

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
    """Byte embedding (256) + learned positions + ``caption_layers`` transformer layers + LN, width 64 (our choice).
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
        self.ada = AdaLN(cond_dim, dim, 6)
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
        self.ada = AdaLN(cond_dim, dim, 2)
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.kv = nn.Linear(dim, 2 * attn_dim)

    def pre(self, h: Tensor, c: Tensor, heads: int) -> _Projected:
        mods = self.ada(c)
        k, v = (_split_heads(z, heads) for z in self.kv(modulate(self.norm1(h), mods[0], mods[1])).chunk(2, -1))
        return None, k, v, mods


class MMDiTBlock(nn.Module):
    """One dual-stream block (Esser et al., ICML 2024): joint attention over the concatenated tokens, or (low-B₀)
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
