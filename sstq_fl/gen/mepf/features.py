"""DP-MEPF's public side and its statistics (Harder, Jalali Asadabadi, Sutherland & Park, "Pre-trained
Perceptual Features Improve Differentially Private Image Generation", TMLR 2023).

1. Φ: a network trained non-privately on PUBLIC data (Fashion-MNIST) and then frozen; its feature vector is the
   concatenation of all conv-layer outputs, flattened.  :func:`train_feature_extractor`.
2. φ₁ = Φ/‖Φ‖ and φ₂ = (Φ⊙Φ)/‖Φ⊙Φ‖, each unit-norm per record *before* any summation.  :func:`embed`.
3. A client's per-class counts and sums of embeddings; the per-record contribution (e_y, φ₁⊗e_y[, φ₂⊗e_y]) has
   L2 norm exactly √(1+m).  :func:`class_sums`.  After the Gaussian release the server forms
   μ̃_{j,y} = S̃_{j,y}/max(ñ_y, 1) and π̃ ∝ max(ñ, 1).  :func:`class_means`.  The paper releases unlabelled mean
   embeddings; this labelled release, its contribution bound and its replace-one sensitivity
   (:func:`replace_one_sensitivity`) are our own construction.

The generator trained on the release is :mod:`sstq_fl.gen.mepf.generator`.  All functions take a ``device``
(CPU default) and explicit seeds; global RNG state is never consumed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...config.vocab import PROFILES
from ..tensors import IMAGE_SHAPE, ArrayLike, DeviceLike, check_float, check_images, check_labels, seeded

LOG = logging.getLogger("sstq_fl.gen.mepf")
EXTRACTOR_FORMAT = 1


def check_moments(moments: Sequence[int]) -> tuple[int, ...]:
    """Validate a moment set: ``(1,)`` (φ₁ only) or ``(1, 2)`` (φ₁ and φ₂), as in the paper."""
    m = tuple(int(j) for j in moments)
    if m not in ((1,), (1, 2)):
        raise ValueError(f"moments must be (1,) or (1, 2), got {tuple(moments)}")
    return m


# ----------------------------------------------------------------------------------------------- Φ backbones


class _Backbone(nn.Module, ABC):
    """A classifier whose :meth:`run` also returns every conv-layer output (the feature taps)."""

    @abstractmethod
    def run(self, x: Tensor) -> tuple[list[Tensor], Tensor]:
        """``(conv-layer outputs, logits)`` for a batch ``x``."""


class _SmallCNN(_Backbone):
    """Profile ``"cpu"`` (our reduction): three 3×3 convs, each followed by ReLU, and a linear head used only in training.

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
    """Profile ``"full"`` (our extractor; the paper's are ImageNet VGG19 and ResNets): CIFAR-stem ResNet-18 (3×3 stem,
    no max-pool), 1 input channel, 28².

    Taps: the stem conv and the 16 block convs (pre-BN) → 64·28²·5 + 128·14²·4 + 256·7²·4 + 512·4²·4 = D = 434,176
    (the three 1×1 shortcut convs are excluded).
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
    """Φ: ``forward(x) -> [n, D]``, the concatenated flattened conv-layer outputs (Harder et al., TMLR 2023).

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
        xs, bs = check_images(x), batch_size or _FEATURE_BATCH[self.profile]
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
    return seeded(lambda: FeatureExtractor(profile, num_classes), seed).to(torch.device(device))


def train_feature_extractor(x: ArrayLike, y: ArrayLike, profile: str = "cpu", epochs: int = 1, seed: int = 0,
                            device: DeviceLike = "cpu", batch_size: int = 128, lr: float = 1e-3,
                            num_classes: int = 10) -> FeatureExtractor:
    """Train Φ NON-privately as a classifier on PUBLIC data, then freeze it.

    Cross-entropy, Adam(lr), seeded shuffling, ``epochs`` passes [R: optimizer and lr are our choice].  The
    returned Φ is in eval mode with ``requires_grad=False`` on every parameter.  Never call this on private data.
    """
    if epochs < 1 or batch_size < 1 or not lr > 0:
        raise ValueError(f"epochs, batch_size and lr must be positive, got {epochs}, {batch_size}, {lr}")
    dev = torch.device(device)
    xs = check_images(x).to(dev)
    ys = check_labels(y, xs.shape[0], num_classes).to(dev)
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
    """Per-record normalized moments ``[n, m·D]`` = [φ₁ | φ₂] from raw features Φ ``[n, D]`` (each unit-normalised,
    as in Harder et al., TMLR 2023).

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
    """Per-record L2 bound b of the additive statistic: √(1+m) for the labelled release (e_y, φ₁⊗e_y[, φ₂⊗e_y]),
    √m for the unlabelled concatenation [φ₁ | φ₂] (1 per moment)."""
    m = len(check_moments(moments))
    return math.sqrt(1 + m) if labelled else math.sqrt(m)


def replace_one_sensitivity(moments: Sequence[int] = (1,)) -> float:
    """Replace-one L2 sensitivity Δ of the labelled release (counts, per-class sums of m unit-norm moments).

    A record (y, φ) adds v(y, φ) = (e_y, φ₁⊗e_y, …, φ_m⊗e_y) with ‖φ_k‖ ≤ 1 (our labelled release; the paper's
    release is unlabelled).  Replacing it by (y', φ') moves the released vector by d = v(y', φ') − v(y, φ):

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
    sums[y] = Σ_{i: y_i = y} emb_i (noise is added elsewhere, once, after aggregation).

    Each record adds e_y to the counts and its embedding to row y, so its contribution has norm √(1+m) when the
    embedding blocks have unit norm.  When ``moments`` is given (recommended), a block norm above 1 + 1e-4 (an
    unnormalized embedding, which would break the sensitivity bound) raises ValueError, and blocks are clipped to
    norm ≤ 1 in float64 so float32 rounding cannot push a contribution past √(1+m).
    """
    e = check_float(emb, 2, "emb")
    y = check_labels(labels, e.shape[0], num_classes).to(e.device)
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
    xs, mom = check_images(x), check_moments(moments)
    y = check_labels(labels, xs.shape[0], fx.num_classes)
    bs = batch_size or _FEATURE_BATCH[fx.profile]
    counts = torch.zeros(fx.num_classes, dtype=torch.float64, device=fx.device)
    sums = torch.zeros(fx.num_classes, len(mom) * fx.dim, dtype=torch.float64, device=fx.device)
    for start in range(0, xs.shape[0], bs):
        c, s = class_sums(embed(fx, xs[start:start + bs], mom), y[start:start + bs], fx.num_classes, mom)
        counts, sums = counts + c, sums + s
    return counts, sums


def class_means(noisy_counts: ArrayLike, noisy_sums: ArrayLike) -> tuple[Tensor, Tensor]:
    """Server post-processing of the released (ñ, S̃): float64 ``(means [K, m·D], π̃ [K])`` with
    μ̃_{j,y} = S̃_{j,y}/max(ñ_y, 1) and π̃_y = max(ñ_y, 1)/Σ_k max(ñ_k, 1).

    Only the noisy, clamped counts are used: never raw counts (the authors' code divides by raw class counts,
    which would leak them).  A negative noisy count therefore gives μ̃_y = S̃_y and a small but positive π̃_y.
    """
    n = check_float(noisy_counts, 1, "noisy_counts")
    s = check_float(noisy_sums, 2, "noisy_sums")
    if s.shape[0] != n.shape[0]:
        raise ValueError(f"noisy_sums has {s.shape[0]} class rows but noisy_counts has {n.shape[0]} classes")
    clamped = n.clamp_min(1.0).to(s.device)
    return s / clamped[:, None], clamped / clamped.sum()
