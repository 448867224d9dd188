"""DP-VQG Stage I: a VQ-VAE tokenizer Θ = (E, G, C) for 28×28 grey images.

Model (van den Oord, Vinyals & Kavukcuoglu, "Neural Discrete Representation Learning", NeurIPS 2017; the
architecture is our choice; the DP-VQG paper says only "lightweight residual encoder-decoder"):

* Encoder E: conv3×3 1→c1, ResBlock, conv4×4/s2 →c2 (14×14), ResBlock, conv4×4/s2 →c2 (7×7), ResBlock,
  conv1×1 →d; every token z_l (l = 1..HW, HW = 49) is L2-normalised, z_l ← z_l/‖z_l‖.
* Codebook C: an ordinary ``K×d`` parameter, L2-normalised in the forward, c̄_k = c_k/‖c_k‖.  Both projections
  are Π_R with R = 1 (the bounded representation), so the Stage II utility −‖z̄_l − c̄_k‖² ∈ [−4, 0].
* Decoder G: the mirror image (conv1×1 d→c2, ResBlock, convT4×4/s2, ResBlock, convT4×4/s2 →c1, ResBlock,
  conv3×3 →1) with a sigmoid output.  ResBlocks are GroupNorm + SiLU, **never BatchNorm** (it couples examples).

Quantisation, with d_l(k) = ‖z_l − c̄_k‖²:

* training: **stochastic top-k**, among the k = 10 nearest codes k̂ ∝ exp(−d_l(k)/τ), τ = 1, drawn by Gumbel-max
  with per-example Gumbel draws (non-protective randomness: it sits inside the clipped per-example loss);
* evaluation: k̂ = argmin_k d_l(k).

The decoder sees the straight-through z_q = z + sg(c̄_k̂ − z) (forward value c̄_k̂, gradient of the identity into E).

Loss of one record x (per-element means, our choice), with e_l = c̄_k̂_l the selected code (same value as z_q):

    ℓ(x) = mean‖x − G(z_q)‖² + mean‖sg[z] − e‖² + β·mean‖z − sg[e]‖² − λ_ent·H(p̄),   β = 0.25, λ_ent = 0.1,

with π_τ(k | z_l) = softmax_k(−d_l(k)/τ) and H(p) = −Σ_k p_k log p_k.  The codebook term uses the selected code
itself (as in van den Oord et al.; with the straight-through z_q in its place it would carry no gradient to C).
**DP fix:** for the private FP-VQG tokenizer p̄_i = (1/HW)·Σ_l π_τ(·|z_l) over record i's own tokens
(``per_example_entropy=True``), so ℓ(x_i) depends on x_i alone and per-example clipping bounds the sensitivity;
the public PP-VQG tokenizer may use the batch average p̄ = mean over the batch and the tokens.

The codebook is learned by these explicit gradients only: no EMA updates, no k-means initialisation, no dead-code
restarts (each would read private data outside the clipped gradient).  Its per-example gradient is clipped together with
the rest of the record's gradient by either per-example-gradient implementation of the project:

* :func:`sstq_fl.gen.dpsgd.per_example_clipped_sum` (``torch.func.vmap(grad)``, what
  :meth:`sstq_fl.gen.runner.DPRunner.dpsgd_round` runs on the clients): the model is registered as
  ``"vqg-tokenizer"``; ``model(x, y, gumbel)`` returns the per-example loss and :meth:`VQTokenizer.draw_noise`
  supplies each example's Gumbel draws from the client's ``generator`` (non-protective);
* :class:`sstq_fl.privacy.dpsgd.DPSGD` (Opacus ``GradSampleModule``): the codebook is a single-input,
  single-output module (:class:`Codebook`: tokens with their Gumbel draws appended in, selected codes with the
  distances appended out), so Opacus's functorch fallback computes its per-sample gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..dpsgd import register_model
from ..runner import Scalar
from ..tensors import check_images, seeded

GRID = 7
HW = GRID * GRID
IMAGE_SHAPE = (1, 28, 28)
NORM_EPS = 1e-8
_FLOAT_FIELDS = ("tau", "beta", "lambda_ent")


@dataclass(frozen=True)
class TokenizerConfig:
    """Tokenizer hyperparameters.

    ``c1``/``c2``: encoder channel widths; ``dim``: token dimension d; ``codebook_size``: K; ``top_k``/``tau``:
    stochastic top-k quantisation; ``beta``: commitment weight; ``lambda_ent``: entropy weight;
    ``per_example_entropy``: p̄ per record (required for DP-SGD) rather than per batch (PP-VQG only);
    ``groups``: GroupNorm groups (``gcd(groups, channels)`` per layer)."""

    c1: int = 16
    c2: int = 32
    dim: int = 16
    codebook_size: int = 64
    top_k: int = 10
    tau: float = 1.0
    beta: float = 0.25
    lambda_ent: float = 0.1
    per_example_entropy: bool = True
    groups: int = 8

    def __post_init__(self) -> None:
        for name in ("c1", "c2", "dim", "codebook_size", "top_k", "groups"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"TokenizerConfig.{name} must be a positive integer, got {getattr(self, name)}")
        if self.codebook_size < 2:
            raise ValueError(f"TokenizerConfig.codebook_size must be >= 2, got {self.codebook_size}")
        if not (self.tau > 0 and self.beta >= 0 and self.lambda_ent >= 0):
            raise ValueError(f"need tau > 0, beta >= 0, lambda_ent >= 0; got {self.tau}, {self.beta}, {self.lambda_ent}")

    @property
    def candidates(self) -> int:
        """The number of stochastic top-k candidates, min(k, K)."""
        return min(self.top_k, self.codebook_size)

    @classmethod
    def cpu(cls, **overrides: Any) -> TokenizerConfig:
        """CPU profile (our reduction): channels 16/32, d = 16, K = 64, 7×7 grid."""
        return replace(cls(c1=16, c2=32, dim=16, codebook_size=64), **overrides)

    @classmethod
    def full(cls, **overrides: Any) -> TokenizerConfig:
        """Full (F)MNIST profile (the DP-VQG paper's d = 32, K = 1024): channels 64/128, d = 32, K = 1024, 7×7 grid."""
        return replace(cls(c1=64, c2=128, dim=32, codebook_size=1024), **overrides)

    @classmethod
    def profile(cls, name: str, **overrides: Any) -> TokenizerConfig:
        """``"cpu"`` or ``"full"``."""
        if name not in ("cpu", "full"):
            raise ValueError(f"unknown tokenizer profile {name!r} (cpu or full)")
        return cls.cpu(**overrides) if name == "cpu" else cls.full(**overrides)


def _norm(channels: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(math.gcd(groups, channels), channels)


class ResBlock(nn.Module):
    """Pre-activation residual block h + conv3×3(SiLU(GN(conv3×3(SiLU(GN(h)))))): GroupNorm, never BatchNorm."""

    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.body = nn.Sequential(_norm(channels, groups), nn.SiLU(), nn.Conv2d(channels, channels, 3, padding=1),
                                  _norm(channels, groups), nn.SiLU(), nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, h: Tensor) -> Tensor:
        return h + self.body(h)  # type: ignore[no-any-return]


def project_unit(v: Tensor) -> Tensor:
    """Π_1 on the last axis, v/(‖v‖ + 10⁻⁸): unit-norm tokens and codes (R = 1)."""
    return v / (torch.linalg.vector_norm(v, dim=-1, keepdim=True) + NORM_EPS)


def squared_distances(z: Tensor, codes: Tensor) -> Tensor:
    """d_l(k) = ‖z_l − c_k‖² = ‖z_l‖² + ‖c_k‖² − 2⟨z_l, c_k⟩ (clamped at 0): ``[..., HW, d] × [K, d] → [..., HW, K]``."""
    cross = z @ codes.T
    return (z.pow(2).sum(-1, keepdim=True) + codes.pow(2).sum(-1) - 2 * cross).clamp_min(0.0)


class Codebook(nn.Module):
    """The K×d codebook, an ordinary parameter (explicit gradients; initialised N(0, I) from the seed, never from data).

    :meth:`forward` takes the tokens with their Gumbel draws appended, ``[n, HW, d + m]`` (m = min(k, K) in
    training, m = 0 for argmin), and returns the selected normalised codes with the distances appended,
    ``[n, HW, d + K]``: one input and one output, which is what Opacus's functorch per-sample path needs."""

    def __init__(self, size: int, dim: int, tau: float):
        super().__init__()
        self.dim, self.tau = dim, tau
        self.weight = nn.Parameter(torch.randn(size, dim))

    def codes(self) -> Tensor:
        """c̄ = Π_1(C), ``[K, d]``."""
        return project_unit(self.weight)

    def forward(self, tokens_and_gumbel: Tensor) -> Tensor:
        z, gumbel = tokens_and_gumbel[..., :self.dim], tokens_and_gumbel[..., self.dim:]
        codes = self.codes()
        dist = squared_distances(z, codes)
        idx = select_codes(dist.detach(), gumbel, self.tau)
        return torch.cat([F.embedding(idx, codes), dist], dim=-1)


def select_codes(dist: Tensor, gumbel: Tensor | None, tau: float) -> Tensor:
    """k̂_l: argmin_k d_l(k) when ``gumbel`` is None or empty; else stochastic top-k, i.e. among the m nearest codes
    (m = ``gumbel.shape[-1]``) argmax_j (−d_l(k_j)/τ + g_j) with g_j ~ Gumbel(0, 1), a draw from ∝ exp(−d_l(k)/τ)."""
    if gumbel is None or gumbel.shape[-1] == 0:
        return dist.argmin(dim=-1)
    neg, cand = (-dist).topk(gumbel.shape[-1], dim=-1)
    pick = (neg / tau + gumbel).argmax(dim=-1, keepdim=True)
    return cand.gather(-1, pick).squeeze(-1)


def entropy(p: Tensor) -> Tensor:
    """H(p) = −Σ_k p_k log p_k over the last axis (0·log 0 = 0)."""
    return -(p * torch.log(p.clamp_min(1e-12))).sum(-1)


class VQTokenizer(nn.Module):
    """The VQ-VAE Θ = (E, G, C) (module docstring).  ``model(x, y, gumbel)`` is the per-example loss vector ``[n]``
    (``returns_loss``: the contract of :func:`sstq_fl.gen.dpsgd.per_example_clipped_sum`; ``y`` is ignored)."""

    returns_loss = True

    def __init__(self, cfg: TokenizerConfig | None = None):
        super().__init__()
        self.cfg = cfg = cfg or TokenizerConfig.cpu()
        c1, c2, d, g = cfg.c1, cfg.c2, cfg.dim, cfg.groups
        self.encoder = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1), ResBlock(c1, g),
            nn.Conv2d(c1, c2, 4, stride=2, padding=1), ResBlock(c2, g),
            nn.Conv2d(c2, c2, 4, stride=2, padding=1), ResBlock(c2, g),
            nn.Conv2d(c2, d, 1))
        self.codebook = Codebook(cfg.codebook_size, d, cfg.tau)
        self.decoder = nn.Sequential(
            nn.Conv2d(d, c2, 1), ResBlock(c2, g),
            nn.ConvTranspose2d(c2, c2, 4, stride=2, padding=1), ResBlock(c2, g),
            nn.ConvTranspose2d(c2, c1, 4, stride=2, padding=1), ResBlock(c1, g),
            nn.Conv2d(c1, 1, 3, padding=1), nn.Sigmoid())

    # ----------------------------------------------------------------------------------------- pieces
    def codes(self) -> Tensor:
        """The normalised codebook c̄, ``[K, d]`` (unit rows)."""
        return self.codebook.codes()

    def encode_tokens(self, x: Tensor) -> Tensor:
        """Normalised tokens z̄ = Π_1(E(x)_l), ``[n, 1, 28, 28] → [n, HW, d]`` (row-major over the 7×7 grid)."""
        h = self.encoder(x)
        return project_unit(h.flatten(2).transpose(1, 2))

    def decode_tokens(self, zq: Tensor) -> Tensor:
        """G: ``[n, HW, d]`` token vectors → images ``[n, 1, 28, 28]`` in (0, 1)."""
        n = zq.shape[0]
        return self.decoder(zq.transpose(1, 2).reshape(n, self.cfg.dim, GRID, GRID))  # type: ignore[no-any-return]

    def decode_indices(self, idx: Tensor) -> Tensor:
        """G(c̄_idx): code indices ``[n, HW]`` in [0, K) → images ``[n, 1, 28, 28]``."""
        idx = torch.as_tensor(idx, device=self.codebook.weight.device)
        if idx.ndim != 2 or idx.shape[1] != HW:
            raise ValueError(f"expected indices [n, {HW}], got {tuple(idx.shape)}")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.cfg.codebook_size):
            raise ValueError(f"indices must lie in [0, {self.cfg.codebook_size})")
        return self.decode_tokens(F.embedding(idx.long(), self.codes()))

    def encode_indices(self, x: Tensor) -> Tensor:
        """argmin_k ‖z̄_l − c̄_k‖², ``[n, HW]`` (the non-private reference tokens; never released for private data)."""
        return squared_distances(self.encode_tokens(x), self.codes()).argmin(-1)

    def draw_noise(self, n: int, generator: torch.Generator) -> Tensor:
        """Each example's Gumbel(0, 1) draws for stochastic top-k, ``[n, HW, min(k, K)]`` (non-protective)."""
        u = torch.rand(n, HW, self.cfg.candidates, generator=generator, device=generator.device)
        return -torch.log(-torch.log(u.clamp(1e-20, 1.0 - 1e-7)))

    # ----------------------------------------------------------------------------------------- loss
    def forward(self, x: Tensor, y: Tensor | None = None, gumbel: Tensor | None = None) -> Tensor:
        """Per-example loss ``[n]`` (module docstring); stochastic top-k with ``gumbel`` in training mode, argmin in
        eval mode (``gumbel`` ignored).  ``y`` is ignored (labels play no part in Stage I)."""
        n = x.shape[0]
        z = self.encode_tokens(x)
        if self.training:
            if gumbel is None:
                raise ValueError("training mode needs the per-example Gumbel draws (draw_noise) for stochastic top-k")
            g = gumbel.to(z.dtype)
        else:
            g = z.new_zeros(*z.shape[:-1], 0)
        out = self.codebook(torch.cat([z, g], dim=-1))
        e, dist = out[..., :self.cfg.dim], out[..., self.cfg.dim:]
        zq = z + (e - z).detach()  # straight-through
        recon = (x - self.decode_tokens(zq)).pow(2).reshape(n, -1).mean(1)
        codebook = (z.detach() - e).pow(2).reshape(n, -1).mean(1)
        commit = (z - e.detach()).pow(2).reshape(n, -1).mean(1)
        probs = torch.softmax(-dist / self.cfg.tau, dim=-1)
        pbar = probs.mean(1) if self.cfg.per_example_entropy else probs.mean((0, 1)).expand(n, -1)
        return recon + codebook + self.cfg.beta * commit - self.cfg.lambda_ent * entropy(pbar)

    def loss(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Per-example loss ``[n]`` of images ``x``; training mode draws the Gumbel noise from ``generator``."""
        gumbel = None
        if self.training:
            if generator is None:
                raise ValueError("training-mode loss needs a torch.Generator for the stochastic top-k draws")
            gumbel = self.draw_noise(x.shape[0], generator).to(x.device)
        return self(x, None, gumbel)  # type: ignore[no-any-return]

    @torch.no_grad()
    def reconstruct(self, x: Tensor) -> Tensor:
        """G(c̄_argmin(E(x))): the evaluation-mode reconstruction."""
        return self.decode_indices(self.encode_indices(x))


def build_tokenizer(cfg: TokenizerConfig | None = None, seed: int = 0) -> VQTokenizer:
    """A freshly initialised tokenizer from ``seed`` (a private CPU RNG; the caller's global RNG is untouched).
    Nothing is initialised from data (no k-means)."""
    return seeded(lambda: VQTokenizer(cfg), seed)


@register_model("vqg-tokenizer")
def _tokenizer_model(config: dict[str, Scalar]) -> nn.Module:
    """``dpsgd.clipped_sum`` builder: ``config["profile"]`` (cpu/full, default cpu) plus any :class:`TokenizerConfig`
    field; ``per_example_entropy`` must stay true (the batch entropy couples examples)."""
    over: dict[str, Any] = {}
    for f in fields(TokenizerConfig):
        if f.name in config:
            v = config[f.name]
            if f.name == "per_example_entropy":
                over[f.name] = v.strip().lower() in ("1", "true", "yes") if isinstance(v, str) else bool(v)
            else:
                over[f.name] = float(v) if f.name in _FLOAT_FIELDS else int(v)
    cfg = TokenizerConfig.profile(str(config.get("profile", "cpu")), **over)
    if not cfg.per_example_entropy:
        raise ValueError("a DP-SGD tokenizer needs per_example_entropy=True (batch entropy couples examples)")
    return VQTokenizer(cfg)


def train_public_tokenizer(x: Tensor, cfg: TokenizerConfig | None = None, steps: int = 1000, batch_size: int = 128,
                           seed: int = 0, lr: float = 1e-3, device: str | torch.device = "cpu",
                           progress: Callable[[int, int, float], None] | None = None
                           ) -> tuple[VQTokenizer, list[float]]:
    """PP-VQG Stage I: train Θ **non-privately on public images** ``x`` (ε₁ = 0).

    Adam(lr = 10⁻³) on the batch mean of the per-example loss, ``steps`` updates on batches of ``batch_size``
    records drawn uniformly with replacement; batches and Gumbel draws come from ``torch.Generator(seed)``, the
    initialisation from ``seed`` too.  ``cfg.per_example_entropy=False`` (batch p̄) is allowed here.
    ``progress(step, steps, loss)`` is called after each step (1-based).  Returns Θ in eval mode and the losses."""
    if steps < 0 or batch_size < 1 or not lr > 0:
        raise ValueError(f"need steps >= 0, batch_size >= 1, lr > 0; got {steps}, {batch_size}, {lr}")
    data = check_images(x, "public images")
    if data.shape[0] == 0:
        raise ValueError("no public images to train the tokenizer on")
    dev = torch.device(device)
    model = build_tokenizer(cfg, seed).to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    history: list[float] = []
    for step in range(steps):
        idx = torch.randint(data.shape[0], (batch_size,), generator=gen)
        gumbel = model.draw_noise(batch_size, gen).to(dev)
        loss = model(data[idx].to(dev), None, gumbel).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        history.append(float(loss.detach()))
        if progress is not None:
            progress(step + 1, steps, history[-1])
    return model.eval(), history
