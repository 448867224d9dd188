"""DP-MEPF model pieces: public perceptual features, normalized moments, class statistics, generator.

Spec: ``generative-pipelines.md`` §4 (DP-MEPF), reconstructed from Harder, Jalali Asadabadi, Sutherland & Park,
"Pre-trained Perceptual Features Improve Differentially Private Image Generation", TMLR 2023.

Pipeline (this module supplies everything except the Gaussian release and the ledger, which live elsewhere):

1. Φ: a network trained non-privately on PUBLIC data (Fashion-MNIST) and then frozen; its feature vector is the
   concatenation of all conv-layer outputs, flattened (§4.1 step 1).  :func:`train_feature_extractor`.
2. φ₁ = Φ/‖Φ‖ and φ₂ = (Φ⊙Φ)/‖Φ⊙Φ‖, each unit-norm per record *before* any summation (§4.1 step 2).  :func:`embed`.
3. A client's per-class counts and sums of embeddings (§4.1 step 4); the per-record contribution
   (e_y, φ₁⊗e_y[, φ₂⊗e_y]) has L2 norm exactly √(1+m).  :func:`class_sums`.  After the (external) Gaussian release the
   server forms μ̃_{j,y} = S̃_{j,y}/max(ñ_y, 1) and π̃ ∝ max(ñ, 1).  :func:`class_means`.
4. Post-processing: train the generator G (§4.2) so that per-class mean embeddings of its samples match μ̃
   (§4.1 step 5), for a fixed number of steps.  :func:`train_generator`, :func:`sample`.

All functions take a ``device`` (CPU default) and explicit seeds; global RNG state is never consumed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

LOG = logging.getLogger(__name__)

PROFILES = ("cpu", "full")
IMAGE_SHAPE = (1, 28, 28)
EXTRACTOR_FORMAT = 1
ArrayLike = Tensor | np.ndarray
DeviceLike = str | torch.device
M = TypeVar("M", bound=nn.Module)


# ----------------------------------------------------------------------------------------------- input checks


def _as_images(x: ArrayLike, name: str = "x") -> Tensor:
    """``[n, 1, 28, 28]`` float32 CPU/device tensor from ``[n, 784]``, ``[n, 28, 28]`` or ``[n, 1, 28, 28]`` in [0, 1]."""
    t = torch.as_tensor(x)
    if t.ndim < 2 or t.ndim > 4 or math.prod(t.shape[1:]) != 784:
        raise ValueError(f"{name}: expected images [n, 784], [n, 28, 28] or [n, 1, 28, 28], got {tuple(t.shape)}")
    t = t.reshape(t.shape[0], *IMAGE_SHAPE).to(torch.float32)
    if t.shape[0] == 0:
        return t
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: images contain NaN or infinite values")
    lo, hi = float(t.min()), float(t.max())
    if lo < -1e-6 or hi > 1 + 1e-6:
        raise ValueError(f"{name}: pixels must lie in [0, 1] (DP-MEPF scaling, spec §1.1), got range [{lo:.3g}, {hi:.3g}]")
    return t


def _as_labels(y: ArrayLike, n: int, num_classes: int, name: str = "labels") -> Tensor:
    """int64 labels ``[n]`` in ``[0, num_classes)``."""
    t = torch.as_tensor(y)
    if t.ndim != 1 or t.shape[0] != n:
        raise ValueError(f"{name}: expected shape [{n}], got {tuple(t.shape)}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name}: must be integers, got {t.dtype}")
    t = t.to(torch.int64)
    if n and (int(t.min()) < 0 or int(t.max()) >= num_classes):
        raise ValueError(f"{name}: values must lie in [0, {num_classes}), got [{int(t.min())}, {int(t.max())}]")
    return t


def _as_float(a: ArrayLike, ndim: int, name: str) -> Tensor:
    """A finite float64 tensor with ``ndim`` dimensions."""
    t = torch.as_tensor(a)
    if t.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    t = t.to(torch.float64)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return t


def check_moments(moments: Sequence[int]) -> tuple[int, ...]:
    """Validate a moment set: ``(1,)`` (φ₁ only) or ``(1, 2)`` (φ₁ and φ₂), as in the paper."""
    m = tuple(int(j) for j in moments)
    if m not in ((1,), (1, 2)):
        raise ValueError(f"moments must be (1,) or (1, 2), got {tuple(moments)}")
    return m


def _seeded(factory: Callable[[], M], seed: int) -> M:
    """Build a module with a private, seeded CPU RNG (the caller's global RNG state is untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()


# ----------------------------------------------------------------------------------------------- Φ backbones


class _Backbone(nn.Module, ABC):
    """A classifier whose :meth:`run` also returns every conv-layer output (the feature taps)."""

    @abstractmethod
    def run(self, x: Tensor) -> tuple[list[Tensor], Tensor]:
        """``(conv-layer outputs, logits)`` for a batch ``x``."""


class _SmallCNN(_Backbone):
    """Profile ``"cpu"`` (spec §4.3): three 3×3 convs, each followed by ReLU, and a linear head used only in training.

    conv 1→16 (stride 1, 28²: 12,544) · conv 16→32 (stride 2, 14²: 6,272) · conv 32→32 (stride 2, 7²: 1,568);
    the taps are the raw conv outputs (before ReLU), so D = 20,384.
    """

    def __init__(self, num_classes: int):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(1, 16, 3, 1, 1), nn.Conv2d(16, 32, 3, 2, 1), nn.Conv2d(32, 32, 3, 2, 1)])
        self.head = nn.Linear(32 * 7 * 7, num_classes)

    def run(self, x: Tensor) -> tuple[list[Tensor], Tensor]:
        taps, h = [], x
        for conv in self.convs:
            h = conv(h)
            taps.append(h)
            h = torch.relu(h)
        return taps, self.head(h.flatten(1))


class _BasicBlock(nn.Module):
    """ResNet basic block; appends its two 3×3 conv outputs (pre-BN) to ``taps``.  1×1 shortcut convs are not tapped."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: Tensor, taps: list[Tensor]) -> Tensor:
        h = self.conv1(x)
        taps.append(h)
        h = self.conv2(torch.relu(self.bn1(h)))
        taps.append(h)
        return torch.relu(self.bn2(h) + self.shortcut(x))


class _ResNet18(_Backbone):
    """Profile ``"full"`` (spec §4.2 "Ours"): CIFAR-stem ResNet-18 (3×3 stem, no max-pool), 1 input channel, 28².

    Taps: the stem conv and the 16 block convs (pre-BN) → 64·28²·5 + 128·14²·4 + 256·7²·4 + 512·4²·4 = D = 434,176
    (the spec's "~430k"; the three 1×1 shortcut convs are excluded).
    """

    def __init__(self, num_classes: int):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(1, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(512, num_classes)

    def run(self, x: Tensor) -> tuple[list[Tensor], Tensor]:
        h = self.stem(x)
        taps = [h]
        h = torch.relu(self.bn(h))
        for block in self.blocks:
            h = block(h, taps)
        return taps, self.head(h.mean(dim=(2, 3)))


_BACKBONES: dict[str, Callable[[int], _Backbone]] = {"cpu": _SmallCNN, "full": _ResNet18}
_FEATURE_BATCH = {"cpu": 1024, "full": 64}


# ----------------------------------------------------------------------------------------------- feature extractor


class FeatureExtractor(nn.Module):
    """Φ: ``forward(x) -> [n, D]``, the concatenated flattened conv-layer outputs (spec §4.1 step 1).

    ``forward`` is differentiable in ``x`` (used with frozen parameters for generator training);
    :meth:`features` is the batched, no-grad, eval-mode extraction used on records.  D: 20,384 for profile
    ``"cpu"``, 434,176 for ``"full"``.
    """

    def __init__(self, profile: str = "cpu", num_classes: int = 10):
        super().__init__()
        if profile not in _BACKBONES:
            raise ValueError(f"unknown feature-extractor profile {profile!r}; expected one of {PROFILES}")
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        self.profile, self.num_classes = profile, num_classes
        self.net = _BACKBONES[profile](num_classes)
        self.train_info: dict[str, Any] = {}
        self.layer_shapes = self._probe_shapes()
        self.dim = sum(math.prod(s) for s in self.layer_shapes)

    def _probe_shapes(self) -> list[tuple[int, ...]]:
        was_training = self.training
        self.eval()
        with torch.no_grad():
            taps, _ = self.net.run(torch.zeros(1, *IMAGE_SHAPE))
        self.train(was_training)
        return [tuple(t.shape[1:]) for t in taps]

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(self, x: Tensor) -> Tensor:
        taps, _ = self.net.run(x)
        return torch.cat([t.flatten(1) for t in taps], dim=1)

    def logits(self, x: Tensor) -> Tensor:
        """Classifier head output (used only to train Φ on public labels)."""
        return self.net.run(x)[1]

    def features(self, x: ArrayLike, batch_size: int | None = None) -> Tensor:
        """Φ(x) ``[n, D]`` float32 on Φ's device: eval mode (BatchNorm uses running statistics, so a record's
        features never depend on the other records in its batch), no grad, in batches to bound memory."""
        return self._map_batches(x, self.forward, batch_size)

    def _map_batches(self, x: ArrayLike, fn: Callable[[Tensor], Tensor], batch_size: int | None) -> Tensor:
        xs, bs = _as_images(x), batch_size or _FEATURE_BATCH[self.profile]
        if bs <= 0:
            raise ValueError(f"batch_size must be positive, got {bs}")
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                return torch.cat([fn(xb.to(self.device)) for xb in xs.split(bs)])
        finally:
            self.train(was_training)


def build_feature_extractor(profile: str = "cpu", seed: int = 0, device: DeviceLike = "cpu",
                            num_classes: int = 10) -> FeatureExtractor:
    """An untrained Φ of the given profile, with seeded PyTorch-default initialization."""
    return _seeded(lambda: FeatureExtractor(profile, num_classes), seed).to(torch.device(device))


def train_feature_extractor(x: ArrayLike, y: ArrayLike, profile: str = "cpu", epochs: int = 1, seed: int = 0,
                            device: DeviceLike = "cpu", batch_size: int = 128, lr: float = 1e-3,
                            num_classes: int = 10) -> FeatureExtractor:
    """Train Φ NON-privately as a classifier on PUBLIC data (spec §4.1 step 1, §4.3), then freeze it.

    Cross-entropy, Adam(lr), seeded shuffling, ``epochs`` passes [R: optimizer and lr are our choice].  The
    returned Φ is in eval mode with ``requires_grad=False`` on every parameter.  Never call this on private data.
    """
    if epochs < 1 or batch_size < 1 or not lr > 0:
        raise ValueError(f"epochs, batch_size and lr must be positive, got {epochs}, {batch_size}, {lr}")
    dev = torch.device(device)
    xs = _as_images(x).to(dev)
    ys = _as_labels(y, xs.shape[0], num_classes).to(dev)
    if xs.shape[0] == 0:
        raise ValueError("train_feature_extractor needs at least one public image")
    fx = build_feature_extractor(profile, seed, dev, num_classes).train()
    opt = torch.optim.Adam(fx.parameters(), lr=lr)
    order = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(xs.shape[0], generator=order).to(dev).split(batch_size):
            loss = F.cross_entropy(fx.logits(xs[idx]), ys[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    fx.train_info = {"epochs": epochs, "seed": seed, "n_train": int(xs.shape[0]), "batch_size": batch_size, "lr": lr,
                     "final_batch_loss": float(loss.detach())}
    fx.zero_grad(set_to_none=True)
    return fx.eval().requires_grad_(False)


def extractor_fingerprint(fx: FeatureExtractor) -> str:
    """SHA-256 (hex) over Φ's state dict (names, dtypes, shapes, raw bytes, sorted by name; BN running statistics
    included), so a ledger/transcript can record exactly which public Φ was used.  Device-independent."""
    h = hashlib.sha256(f"mepf-extractor:{fx.profile}:{fx.num_classes}".encode())
    for name, t in sorted(fx.state_dict().items()):
        c = t.detach().cpu().contiguous().reshape(-1)
        h.update(f"|{name}|{c.dtype}|{tuple(t.shape)}|".encode())
        h.update(c.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_extractor(fx: FeatureExtractor, path: str | Path) -> None:
    """Write Φ's state dict to ``path`` (torch.save) and its config to ``<path>.json`` (profile, classes, D,
    layer shapes, fingerprint, training info)."""
    p = Path(path)
    torch.save({k: v.detach().cpu() for k, v in fx.state_dict().items()}, p)
    cfg = {"format": EXTRACTOR_FORMAT, "profile": fx.profile, "num_classes": fx.num_classes, "dim": fx.dim,
           "layer_shapes": [list(s) for s in fx.layer_shapes], "fingerprint": extractor_fingerprint(fx),
           "train_info": fx.train_info}
    Path(f"{p}.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load_extractor(path: str | Path, device: DeviceLike = "cpu") -> FeatureExtractor:
    """Inverse of :func:`save_extractor` (``torch.load(weights_only=True)``); verifies the recorded fingerprint and
    returns a frozen Φ in eval mode."""
    p = Path(path)
    cfg = json.loads(Path(f"{p}.json").read_text())
    if cfg.get("format") != EXTRACTOR_FORMAT:
        raise ValueError(f"{p}.json: unsupported extractor format {cfg.get('format')!r}")
    fx = FeatureExtractor(cfg["profile"], int(cfg["num_classes"]))
    fx.load_state_dict(torch.load(p, map_location="cpu", weights_only=True))
    fx.train_info = dict(cfg.get("train_info", {}))
    if extractor_fingerprint(fx) != cfg["fingerprint"]:
        raise ValueError(f"{p}: weights do not match the fingerprint recorded in {p}.json")
    return fx.to(torch.device(device)).eval().requires_grad_(False)


# ----------------------------------------------------------------------------------------------- embeddings


def normalize_moments(feats: Tensor, moments: Sequence[int] = (1,)) -> Tensor:
    """Per-record normalized moments ``[n, m·D]`` = [φ₁ | φ₂] from raw features Φ ``[n, D]`` (spec §4.1 step 2).

    φ₁ = Φ/‖Φ‖ and φ₂ = (Φ⊙Φ)/‖Φ⊙Φ‖, row by row, so each block has unit norm and the concatenation has norm √m.
    Zero-vector guard: a block whose norm is 0 (Φ = 0, or Φ⊙Φ underflowing) is returned as zeros (norm 0 ≤ 1).
    For float range, Φ is first divided by s = max|Φ| (detached): both ratios are scale invariant, so the value is
    unchanged and, by Euler's identity for degree-0 homogeneous maps, so is the gradient.  Differentiable.
    """
    mom = check_moments(moments)
    if feats.ndim != 2:
        raise ValueError(f"features must be [n, D], got {tuple(feats.shape)}")
    s = feats.detach().abs().amax(dim=1, keepdim=True)
    v = feats / torch.where(s > 0, s, torch.ones_like(s))
    blocks = []
    for j in mom:
        b = v if j == 1 else v * v
        norm = torch.linalg.vector_norm(b, dim=1, keepdim=True)
        blocks.append(b / torch.where(norm > 0, norm, torch.ones_like(norm)))
    return torch.cat(blocks, dim=1)


def embed(fx: FeatureExtractor, x: ArrayLike, moments: Sequence[int] = (1,), batch_size: int | None = None) -> Tensor:
    """[φ₁(x) | φ₂(x)] ``[n, m·D]`` float32 on Φ's device (eval mode, no grad, batched): see :func:`normalize_moments`."""
    mom = check_moments(moments)
    return fx._map_batches(x, lambda xb: normalize_moments(fx(xb), mom), batch_size)


# ----------------------------------------------------------------------------------------------- class statistics


def contribution_bound(moments: Sequence[int] = (1,), labelled: bool = True) -> float:
    """Per-record L2 bound b of the additive statistic: √(1+m) for the labelled release (e_y, φ₁⊗e_y[, φ₂⊗e_y])
    (spec §4.1 step 4), √m for the unlabelled concatenation [φ₁ | φ₂] (1 per moment, step 3)."""
    m = len(check_moments(moments))
    return math.sqrt(1 + m) if labelled else math.sqrt(m)


def replace_one_sensitivity(moments: Sequence[int] = (1,)) -> float:
    """Replace-one L2 sensitivity Δ of the labelled release (counts, per-class sums of m unit-norm moments).

    A record (y, φ) adds v(y, φ) = (e_y, φ₁⊗e_y, …, φ_m⊗e_y) with ‖φ_k‖ ≤ 1 (spec §4.1 step 4; Harder et al.,
    TMLR 2023).  Replacing it by (y', φ') moves the released vector by d = v(y', φ') − v(y, φ):

    * y = y': the count coordinates cancel and d = ((φ'_k − φ_k)⊗e_y)_k, so ‖d‖² = Σ_k ‖φ'_k − φ_k‖² ≤ 4m,
      i.e. ‖d‖ ≤ 2√m, attained by φ' = −φ;
    * y ≠ y': e_y and e_{y'} (and the rows y, y') are orthogonal, so ‖d‖² = 2 + Σ_k (‖φ_k‖² + ‖φ'_k‖²) ≤ 2 + 2m,
      attained by any unit moments.

    Hence Δ = max(√(2(1+m)), 2√m): 2 for m = 1, 2√2 for m = 2, against the generic 2b = 2√(1+m) of the
    triangle inequality (2√2 and 2√3).  The Gaussian mechanism with std σ·Δ/2 is then GaussianEvent(σ).
    """
    m = len(check_moments(moments))
    return max(math.sqrt(2 * (1 + m)), 2 * math.sqrt(m))


def class_sums(emb: ArrayLike, labels: ArrayLike, num_classes: int,
               moments: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """A client's labelled sufficient statistics: ``counts`` float64 ``[K]`` and ``sums`` float64 ``[K, m·D]``,
    sums[y] = Σ_{i: y_i = y} emb_i (spec §4.1 step 4; noise is added elsewhere, once, after aggregation).

    Each record adds e_y to the counts and its embedding to row y, so its contribution has norm √(1+m) when the
    embedding blocks have unit norm.  When ``moments`` is given (recommended), a block norm above 1 + 1e-4 (an
    unnormalized embedding, which would break the sensitivity bound) raises ValueError, and blocks are clipped to
    norm ≤ 1 in float64 so float32 rounding cannot push a contribution past √(1+m).
    """
    e = _as_float(emb, 2, "emb")
    y = _as_labels(labels, e.shape[0], num_classes).to(e.device)
    if moments is not None:
        e = _clip_blocks(e, len(check_moments(moments)))
    counts = torch.bincount(y, minlength=num_classes).to(torch.float64)
    sums = torch.zeros(num_classes, e.shape[1], dtype=torch.float64, device=e.device).index_add_(0, y, e)
    return counts, sums


def _clip_blocks(e: Tensor, m: int) -> Tensor:
    """Reject blocks of norm > 1 + 1e-4 (unnormalized input); clip the rest to norm ≤ 1 in float64, which removes the
    float32 rounding excess so the √(1+m) bound holds to float64 precision."""
    if e.shape[1] % m:
        raise ValueError(f"emb width {e.shape[1]} is not a multiple of the number of moments {m}")
    blocks = e.reshape(e.shape[0], m, -1)
    norms = torch.linalg.vector_norm(blocks, dim=2, keepdim=True)
    if e.shape[0] and float(norms.max()) > 1 + 1e-4:
        raise ValueError(f"emb block norm {float(norms.max()):.6g} exceeds 1: embeddings must be normalized per record")
    return (blocks / norms.clamp_min(1.0)).reshape(e.shape)


def embedded_class_sums(fx: FeatureExtractor, x: ArrayLike, labels: ArrayLike, moments: Sequence[int] = (1,),
                        batch_size: int | None = None) -> tuple[Tensor, Tensor]:
    """Streaming :func:`class_sums` of :func:`embed` for a client's records, without materializing all embeddings
    (the full profile has m·434k features per record).  Returns float64 ``(counts [K], sums [K, m·D])`` on Φ's device;
    a client with no records returns zeros."""
    xs, mom = _as_images(x), check_moments(moments)
    y = _as_labels(labels, xs.shape[0], fx.num_classes)
    bs = batch_size or _FEATURE_BATCH[fx.profile]
    counts = torch.zeros(fx.num_classes, dtype=torch.float64, device=fx.device)
    sums = torch.zeros(fx.num_classes, len(mom) * fx.dim, dtype=torch.float64, device=fx.device)
    for start in range(0, xs.shape[0], bs):
        c, s = class_sums(embed(fx, xs[start:start + bs], mom), y[start:start + bs], fx.num_classes, mom)
        counts, sums = counts + c, sums + s
    return counts, sums


def class_means(noisy_counts: ArrayLike, noisy_sums: ArrayLike) -> tuple[Tensor, Tensor]:
    """Server post-processing of the released (ñ, S̃) (spec §4.1 step 4): float64 ``(means [K, m·D], π̃ [K])`` with
    μ̃_{j,y} = S̃_{j,y}/max(ñ_y, 1) and π̃_y = max(ñ_y, 1)/Σ_k max(ñ_k, 1).

    Only the noisy, clamped counts are used: never raw counts (the authors' code divides by raw class counts,
    which would leak them).  A negative noisy count therefore gives μ̃_y = S̃_y and a small but positive π̃_y.
    """
    n = _as_float(noisy_counts, 1, "noisy_counts")
    s = _as_float(noisy_sums, 2, "noisy_sums")
    if s.shape[0] != n.shape[0]:
        raise ValueError(f"noisy_sums has {s.shape[0]} class rows but noisy_counts has {n.shape[0]} classes")
    clamped = n.clamp_min(1.0).to(s.device)
    return s / clamped[:, None], clamped / clamped.sum()


# ----------------------------------------------------------------------------------------------- generator


class Generator(nn.Module):
    """Conditional (F)MNIST generator (spec §4.2): [code | one-hot(y)] → FC hidden → BN → ReLU → FC 16·7·7 → BN →
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
    """Generator-training hyperparameters (spec §4.2: Adam β₁ = 0.5, batch 100; all [R] from the authors' code).

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
        """CPU profile (spec §4.3): code 10, hidden 128, 500 steps, batch 100.  lr 3e-3 / m_avg_lr 3e-2 are [R]: the
        paper's 1e-4/1e-5 are tuned for ~100k steps.  Chosen on PUBLIC FMNIST class means only (never on private
        data): over 500 steps, lr ∈ {3e-4, 1e-3, 3e-3} (m_avg_lr = 10·lr) gave final matching losses 0.18 / 0.12 / 0.10
        and pixel-probe label accuracy 0.74 / 0.81 / 0.90 (moving average: 0.18 / 0.12 / 0.12, 0.73 / 0.85 / 0.86)."""
        return replace(cls(steps=500, batch=100, lr=3e-3, m_avg_lr=3e-2, code_dim=10, hidden=128), **overrides)

    @classmethod
    def full(cls, dataset: str = "mnist", **overrides: Any) -> GeneratorConfig:
        """Full profile (spec §4.2): code 90, hidden 500, 100k steps, batch 100; lr (moving-average lr) is
        1e-5 (1e-4) for MNIST and 1e-4 (1e-3) for FMNIST."""
        lrs = {"mnist": (1e-5, 1e-4), "fmnist": (1e-4, 1e-3)}
        if dataset not in lrs:
            raise ValueError(f"unknown dataset {dataset!r} for GeneratorConfig.full; expected one of {sorted(lrs)}")
        lr, m_lr = lrs[dataset]
        return replace(cls(steps=100_000, batch=100, lr=lr, m_avg_lr=m_lr, code_dim=90, hidden=500), **overrides)


def _check_targets(fx: FeatureExtractor, means: ArrayLike, class_probs: ArrayLike, m: int,
                   dev: torch.device) -> tuple[Tensor, Tensor]:
    """float32 μ̃ ``[K, m·D]`` and float64 π̃ ``[K]`` on ``dev``, validated against Φ and the moment count."""
    mu = _as_float(means, 2, "means")
    p = _as_float(class_probs, 1, "class_probs")
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
    betas (β₁, 0.999) [R]); the generator objective is −⟨sg(m), μ̂_fake⟩, whose gradient in μ̂_fake equals the
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
    """Train G on released statistics only: post-processing (spec §4.1 step 5).

    Minimizes Σ_j Σ_y ‖μ̃_{j,y} − mean_{b: y_b = y} φ_j(G(z_b, y_b))‖² (classes absent from a batch are skipped) with
    y_b ~ π̃, z_b ~ N(0, I), Adam(lr, β₁); or GFMN's moving-average variant when ``cfg.moving_average``.  Runs exactly
    ``cfg.steps`` updates: no early stopping or checkpoint selection on private data (§4.4.6).  Φ is moved to
    ``device``, put in eval mode and frozen (``requires_grad=False``); it is not run under no_grad, so gradients
    reach G through it.  Returns G in eval mode and the per-step matching losses; ``log_every > 0`` logs them and
    ``on_step(step, loss)`` (e.g. a progress bar) is called after each step (1-based).
    """
    cfg, mom, dev = cfg or GeneratorConfig.cpu(), check_moments(moments), torch.device(device)
    target, probs = _check_targets(fx, means, class_probs, len(mom), dev)
    fx = fx.to(dev).eval().requires_grad_(False)
    gen = _seeded(lambda: Generator(cfg.code_dim, cfg.hidden, target.shape[0]), seed).to(dev).train()
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
        return _as_labels(labels, n, k)
    if class_probs is None:
        return (torch.arange(n) % k)[torch.randperm(n, generator=g)]
    p = _as_float(class_probs, 1, "class_probs")
    if p.shape[0] != k or float(p.min()) < 0 or not float(p.sum()) > 0:
        raise ValueError(f"class_probs must be {k} nonnegative weights with a positive sum")
    return torch.multinomial(p.cpu(), n, replacement=True, generator=g)
