"""Evaluation of DP generators, offline and CPU-friendly.

1. Downstream accuracy: a probe (LeNet-5; optionally logistic regression or an MLP) is trained on labelled
   synthetic samples for a fixed number of epochs and tested once on real held-out data (the pipelines:
   ``eval_score``, half of ``priv_test``, :mod:`sstq_fl.gen.heldout`; no model selection on the test split).
2. Domain-FD: an evaluator CNN (conv 32-64-128, 128-d penultimate layer; the architecture is our choice) trained
   once on real held-out data (the pipelines: ``eval_fit``, the other half of ``priv_test``), cached with its
   sha256; the Fréchet distance between its penultimate features of real and generated images, per class too,
   plus label consistency.  It is *not* comparable to Inception FID.
3. Inception FID, only from a user-supplied local weights file (never downloaded).
4. Helpers: a PNG sample grid and the membership-inference AUC of an audit.

Images are ``[n, 1, 28, 28]`` (``[n, 28, 28]`` and ``[n, 784]`` are accepted) with pixels in [0, 1]; map
[-1, 1] samples with ``(x + 1) / 2`` first.  Every function seeds its own RNGs and leaves the global one alone.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..io import atomic_write_bytes

DOMAIN_FD_NOTE = "domain-FD, not comparable to Inception FID"
EVALUATOR_VERSION = "evaluator-cnn-v1"
NUM_CLASSES = 10
_PIXEL_TOL = 1e-3
Images = np.ndarray | torch.Tensor


# ----------------------------------------------------------------------------------------------- input checks
def _pixels(x: Images, name: str) -> torch.Tensor:
    """``x`` as a float32 CPU tensor, checking it is non-empty, finite and in [0, 1]."""
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x.detach()).to("cpu", torch.float32)
    if t.ndim == 0 or t.shape[0] == 0:
        raise ValueError(f"{name}: no images (shape {tuple(t.shape)})")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name}: contains NaN or infinite pixels")
    lo, hi = float(t.min()), float(t.max())
    if lo < -_PIXEL_TOL or hi > 1 + _PIXEL_TOL:
        raise ValueError(f"{name}: pixels span [{lo:.3g}, {hi:.3g}], expected [0, 1] (map [-1, 1] with (x + 1) / 2, then clamp)")
    return t.clamp(0, 1)


def as_images(x: Images, name: str = "images") -> torch.Tensor:
    """28×28 grayscale images as float32 ``[n, 1, 28, 28]`` in [0, 1] (accepts ``[n, 28, 28]`` and ``[n, 784]``)."""
    t = _pixels(x, name)
    if t.shape[1:] in (torch.Size([784]), torch.Size([28, 28]), torch.Size([1, 28, 28])):
        return t.reshape(-1, 1, 28, 28).contiguous()
    raise ValueError(f"{name}: expected [n, 1, 28, 28], [n, 28, 28] or [n, 784] images, got {tuple(t.shape)}")


def as_labels(y: Images, n: int, name: str = "labels") -> torch.Tensor:
    """Integer class labels in ``0..9`` as int64 ``[n]``."""
    a = np.asarray(y.detach().cpu() if isinstance(y, torch.Tensor) else y)
    if a.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},) to match the images, got {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name}: expected integer class labels, got dtype {a.dtype}")
    if a.min() < 0 or a.max() >= NUM_CLASSES:
        raise ValueError(f"{name}: labels must lie in 0..{NUM_CLASSES - 1}, got {a.min()}..{a.max()}")
    return torch.from_numpy(a.astype(np.int64))


# ----------------------------------------------------------------------------------------------- models
class LeNet5(nn.Module):
    """LeNet-5 probe (LeCun, Bottou, Bengio & Haffner, Proc. IEEE 1998): conv 6@5×5 (pad 2 on 28×28), pool, conv 16@5×5,
    pool, FC 120-84-10; ReLU and max-pooling (our choice)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        self.classifier = nn.Sequential(nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                                        nn.Linear(84, NUM_CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class EvaluatorCNN(nn.Module):
    """Evaluation-only CNN (its architecture is our choice): conv 32-64-128 (3×3, ReLU, max-pool after each), FC to a 128-d
    penultimate layer (ReLU) whose activations are the domain-FD features, then a 10-way head.  No BatchNorm,
    so features do not depend on the batch."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for cin, cout in ((1, 32), (32, 64), (64, 128)):
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        self.body = nn.Sequential(*layers, nn.Flatten(), nn.Linear(128 * 3 * 3, 128), nn.ReLU())
        self.head = nn.Linear(128, NUM_CLASSES)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


PROBES: dict[str, Callable[[], nn.Module]] = {
    "lenet": LeNet5,
    "logreg": lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, NUM_CLASSES)),
    "mlp": lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, NUM_CLASSES)),
}


def _seeded(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    """Build a model with its initialisation drawn from ``torch.manual_seed(seed)`` without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()


def _fit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, seed: int, batch_size: int = 128) -> nn.Module:
    """Minimise the cross-entropy with Adam (lr 1e-3) for exactly ``epochs`` passes over seeded random batches."""
    if not isinstance(epochs, int | np.integer) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(batch_size):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


@torch.no_grad()
def _batched(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
    return torch.cat([fn(b) for b in x.split(batch_size)])


# ----------------------------------------------------------------------------------------------- 1. downstream accuracy
def downstream_accuracy(syn_x: Images, syn_y: Images, test_x: Images, test_y: Images, epochs: int = 2, seed: int = 0,
                        probe: str = "lenet", batch_size: int = 32) -> float:
    """Downstream accuracy: train a fresh ``probe`` ("lenet", "logreg" or "mlp") on the labelled
    synthetic set with Adam 1e-3 for ``epochs`` epochs (10 full, 2 on CPU), then return its accuracy on the
    real test set, evaluated once with the final weights.  Batch 32 (our choice), so that the CPU configuration
    (10³ samples, 2 epochs) still takes ~60 Adam steps per epoch."""
    if probe not in PROBES:
        raise ValueError(f"unknown probe {probe!r}; choose one of {sorted(PROBES)}")
    x = as_images(syn_x, "syn_x")
    y = as_labels(syn_y, len(x), "syn_y")
    tx = as_images(test_x, "test_x")
    ty = as_labels(test_y, len(tx), "test_y")
    model = _fit(_seeded(PROBES[probe], seed), x, y, epochs, seed, batch_size)
    pred = _batched(lambda b: model(b).argmax(1), tx)
    return float((pred == ty).double().mean())


# ----------------------------------------------------------------------------------------------- 2. evaluator + domain-FD
@dataclass(frozen=True, eq=False)
class Evaluator:
    """The trained evaluator CNN, the sha256 of its serialized weights file, and where it is cached (if anywhere)."""

    net: EvaluatorCNN
    sha256: str
    path: Path | None = None

    def features_and_predictions(self, x: Images, name: str = "images") -> tuple[np.ndarray, np.ndarray]:
        """Penultimate 128-d features (float64 ``[n, 128]``) and predicted classes of ``x``."""
        t = as_images(x, name)
        self.net.eval()
        feats = _batched(self.net.features, t)
        with torch.no_grad():
            pred = self.net.head(feats).argmax(1)
        return feats.double().numpy(), pred.numpy()


def _data_key(x: torch.Tensor, y: torch.Tensor, settings: tuple[int, ...]) -> str:
    """What an evaluator was trained from: sha256 of the architecture, training settings, pixels and labels."""
    h = hashlib.sha256(f"{EVALUATOR_VERSION}|{settings}|{tuple(x.shape)}|".encode())
    h.update(x.numpy().tobytes())
    h.update(y.numpy().tobytes())
    return h.hexdigest()


def _read_evaluator(path: Path) -> tuple[EvaluatorCNN, dict[str, Any], str]:
    """Load a cached evaluator file with ``torch.load(weights_only=True)``: (net, meta, sha256 of the file)."""
    blob = path.read_bytes()
    try:
        obj = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
        net = EvaluatorCNN()
        net.load_state_dict(obj["state_dict"])
        meta = dict(obj["meta"])
    except Exception as exc:
        raise ValueError(f"{path}: not a readable evaluator cache ({type(exc).__name__}: {exc}); delete it to retrain") from exc
    return net.eval(), meta, hashlib.sha256(blob).hexdigest()


def load_evaluator(path: str | os.PathLike[str], expected_sha256: str | None = None) -> Evaluator:
    """A cached evaluator, optionally checking the file's sha256 against the recorded one."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"evaluator cache {p} not found (train it with train_evaluator)")
    net, _, sha = _read_evaluator(p)
    if expected_sha256 is not None and sha != expected_sha256:
        raise ValueError(f"{p}: sha256 {sha} differs from the recorded {expected_sha256}")
    return Evaluator(net, sha, p)


def train_evaluator(train_x: Images, train_y: Images, epochs: int = 3, seed: int = 0,
                    cache_path: str | os.PathLike[str] | None = None, batch_size: int = 128) -> Evaluator:
    """Train the evaluator CNN once on real data (Adam 1e-3; 3 epochs, batch 128 by default; our choice) or reuse
    the cache at ``cache_path`` when it was trained from the same data, epochs, seed and batch size.  The file
    is a ``torch.save`` of ``{"state_dict", "meta"}`` written atomically; ``Evaluator.sha256`` is the file's
    hash (record it)."""
    x = as_images(train_x, "train_x")
    y = as_labels(train_y, len(x), "train_y")
    key = _data_key(x, y, (epochs, seed, batch_size))
    p = Path(cache_path).expanduser() if cache_path is not None else None
    if p is not None and p.is_file():
        net, meta, sha = _read_evaluator(p)
        if meta.get("data_key") == key:
            return Evaluator(net, sha, p)
    net = cast(EvaluatorCNN, _fit(_seeded(EvaluatorCNN, seed), x, y, epochs, seed, batch_size))
    buf = io.BytesIO()
    torch.save({"state_dict": net.state_dict(), "meta": {"data_key": key, "version": EVALUATOR_VERSION,
                                                         "epochs": epochs, "seed": seed, "batch_size": batch_size,
                                                         "n_train": len(x)}}, buf)
    if p is not None:
        atomic_write_bytes(p, buf.getvalue())
    return Evaluator(net, hashlib.sha256(buf.getvalue()).hexdigest(), p)


def _psd_sqrt(s: np.ndarray) -> np.ndarray:
    """Symmetric square root of a symmetric PSD matrix by eigendecomposition (tiny negative eigenvalues -> 0)."""
    w, v = np.linalg.eigh((s + s.T) / 2)
    return (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def frechet_distance_from_stats(mu1: np.ndarray, s1: np.ndarray, mu2: np.ndarray, s2: np.ndarray) -> float:
    """Fréchet distance between N(mu1, s1) and N(mu2, s2): ‖mu1−mu2‖² + Tr(s1 + s2 − 2(s1 s2)^{1/2}).  The trace
    of (s1 s2)^{1/2} is computed symmetrically as Σ√λ_i(s1^{1/2} s2 s1^{1/2}) (same spectrum, real, PSD);
    a tiny negative total from round-off is clipped to 0."""
    mu1, mu2, s1, s2 = (np.asarray(a, dtype=np.float64) for a in (mu1, mu2, s1, s2))
    d = mu1.shape[0]
    if mu1.shape != (d,) or mu2.shape != (d,) or s1.shape != (d, d) or s2.shape != (d, d):
        raise ValueError(f"shape mismatch: mu {mu1.shape}, {mu2.shape}; sigma {s1.shape}, {s2.shape}")
    if not all(np.isfinite(a).all() for a in (mu1, mu2, s1, s2)):
        raise ValueError("Fréchet statistics contain NaN or infinite values")
    r = _psd_sqrt(s1)
    m = r @ s2 @ r
    tr_sqrt = np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0, None)).sum()
    fd = float(np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2) - 2 * tr_sqrt)
    return max(fd, 0.0)


def frechet_distance(feat_a: np.ndarray, feat_b: np.ndarray) -> float:
    """Fréchet distance between Gaussians fitted to two feature sets ``[n, d]`` (sample means, covariances with ddof 1)."""
    a, b = np.asarray(feat_a, dtype=np.float64), np.asarray(feat_b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"feature sets must be [n, d] with equal d, got {a.shape} and {b.shape}")
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"need at least 2 feature vectors per set, got {len(a)} and {len(b)}")
    return frechet_distance_from_stats(a.mean(0), np.cov(a, rowvar=False, ddof=1).reshape(a.shape[1], -1),
                                       b.mean(0), np.cov(b, rowvar=False, ddof=1).reshape(b.shape[1], -1))


def balanced_indices(labels: Images, m: int, seed: int = 0) -> np.ndarray:
    """``m`` indices into ``labels``, class-balanced and seeded: each class present gets ⌊m/K⌋ or ⌈m/K⌉ records
    (the remainder goes to randomly chosen classes), drawn uniformly without replacement; sorted.  A real
    evaluation set must not be a prefix of a class-sorted split (``priv_test[:m]`` holds the first classes only)."""
    y = np.asarray(labels.detach().cpu() if isinstance(labels, torch.Tensor) else labels)
    classes = np.unique(y)
    if y.ndim != 1 or not 0 < m <= len(y):
        raise ValueError(f"need 0 < m <= {len(y)} labels (1-D), got m={m}, shape {y.shape}")
    g = np.random.default_rng(seed)
    per = np.full(len(classes), m // len(classes))
    per[g.permutation(len(classes))[: m % len(classes)]] += 1
    short = [int(c) for c, k in zip(classes, per) if (y == c).sum() < k]
    if short:
        raise ValueError(f"cannot draw {m} class-balanced records: class(es) {short} have fewer than {per.max()}")
    keep = [g.permutation(np.flatnonzero(y == c))[:k] for c, k in zip(classes, per)]
    return np.sort(np.concatenate(keep))


def _check_real_balance(ry: np.ndarray, fy: np.ndarray) -> None:
    """Refuse a real set that cannot stand for the class mix: a generated class absent from it, or a class
    with fewer than half the mean count (over the classes on either side)."""
    absent = sorted(set(fy.tolist()) - set(ry.tolist()))
    if absent:
        raise ValueError(f"real_y: classes {absent} of the generated samples are absent from the real set "
                         "(use a class-balanced real subset, e.g. balanced_indices)")
    classes = np.union1d(ry, fy)
    counts = np.array([(ry == c).sum() for c in classes])
    low = [int(c) for c, n in zip(classes, counts) if n < 0.5 * len(ry) / len(classes)]
    if low:
        raise ValueError(f"real_y: classes {low} have fewer than half the mean count {len(ry) / len(classes):.1f} "
                         "(use a class-balanced real subset, e.g. balanced_indices)")


def domain_fd(evaluator: Evaluator, real_x: Images, real_y: Images, fake_x: Images, fake_y: Images) -> dict[str, Any]:
    """Domain-FD (the Fréchet distance of Heusel et al., NeurIPS 2017, in our evaluator's feature space) between
    evaluator features of real ``priv_test`` and equally many generated samples, per-class FD (None where a class has
    fewer than 2 images on either side) and label consistency, the fraction of generated samples the evaluator assigns
    to their conditioning label ``fake_y``.

    The real set must be class-balanced (:func:`_check_real_balance`, ValueError otherwise): the FD of an
    unbalanced real set measures its label shift, not sample quality."""
    ry = as_labels(real_y, len(real_y), "real_y").numpy()
    _check_real_balance(ry, as_labels(fake_y, len(fake_y), "fake_y").numpy())
    fr, _ = evaluator.features_and_predictions(real_x, "real_x")
    ff, pred = evaluator.features_and_predictions(fake_x, "fake_x")
    ry, fy = as_labels(real_y, len(fr), "real_y").numpy(), as_labels(fake_y, len(ff), "fake_y").numpy()
    per_class: dict[str, float | None] = {}
    for c in np.union1d(ry, fy):
        ok = (ry == c).sum() >= 2 and (fy == c).sum() >= 2
        per_class[str(c)] = frechet_distance(fr[ry == c], ff[fy == c]) if ok else None
    return {"metric": "domain_fd", "note": DOMAIN_FD_NOTE, "domain_fd": frechet_distance(fr, ff),
            "per_class_fd": per_class, "label_consistency": float((pred == fy).mean()),
            "n_real": len(fr), "n_fake": len(ff), "evaluator_sha256": evaluator.sha256}


# ----------------------------------------------------------------------------------------------- 3. Inception FID
def read_inception_state(path: Path) -> dict[str, torch.Tensor]:
    """The Inception-v3 state dict in a local file (``torch.load(weights_only=True)``), checked for ``fc.weight``."""
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"{path}: cannot read Inception weights ({type(exc).__name__}: {exc})") from exc
    if not isinstance(sd, dict) or not isinstance(sd.get("fc.weight"), torch.Tensor):
        raise ValueError(f"{path}: not an Inception-v3 state dict (no fc.weight); use pytorch-fid's pt_inception-*.pth "
                         "or torchvision's inception_v3_google-*.pth")
    return sd


def _fid_blocks(net: nn.Module) -> str:
    """Swap in pytorch-fid's TF-compatible blocks (as its ``fid_inception_v3`` does) when pytorch-fid is installed."""
    try:
        from pytorch_fid import inception as pf
    except ImportError:
        return "torchvision blocks (approximate: pip install pytorch-fid for the TF-compatible pooling)"
    net.Mixed_5b, net.Mixed_5c, net.Mixed_5d = pf.FIDInceptionA(192, 32), pf.FIDInceptionA(256, 64), pf.FIDInceptionA(288, 64)
    net.Mixed_6b, net.Mixed_6c = pf.FIDInceptionC(768, channels_7x7=128), pf.FIDInceptionC(768, channels_7x7=160)
    net.Mixed_6d, net.Mixed_6e = pf.FIDInceptionC(768, channels_7x7=160), pf.FIDInceptionC(768, channels_7x7=192)
    net.Mixed_7b, net.Mixed_7c = pf.FIDInceptionE_1(1280), pf.FIDInceptionE_2(2048)
    return "pytorch-fid blocks"


def _load_inception(path: Path) -> tuple[nn.Module, str]:
    """Inception-v3 returning pool3 (2048-d) features, built by torchvision from a local state dict; a
    1008-class file is pytorch-fid's port of the TF FID network."""
    sd = read_inception_state(path)
    try:
        from torchvision.models import inception_v3
    except ImportError as exc:
        raise ImportError("Inception FID needs torchvision (the release matching the installed torch) to build "
                          "Inception-v3; install it, or use the domain-FD instead") from exc
    n_cls, aux = int(sd["fc.weight"].shape[0]), any(k.startswith("AuxLogits.") for k in sd)
    net = inception_v3(weights=None, aux_logits=aux, num_classes=n_cls, transform_input=False, init_weights=False)
    blocks = _fid_blocks(net) if n_cls == 1008 else "torchvision blocks"
    net.load_state_dict(sd)
    net.fc = nn.Identity()
    return net.eval(), blocks


def inception_preprocess(x: torch.Tensor) -> torch.Tensor:
    """Inception input: grayscale replicated to 3 channels, bilinear resize to 299×299, pixels mapped to [-1, 1]."""
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f"expected [n, 1|3, H, W] images, got {tuple(x.shape)}")
    x = x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
    return 2 * F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False) - 1


def inception_fid(weights_path: str | os.PathLike[str], real_x: Images, fake_x: Images, batch_size: int = 50) -> dict[str, Any]:
    """Inception FID (Heusel et al., "GANs Trained by a Two Time-Scale Update Rule Converge to a Local Nash
    Equilibrium", NeurIPS 2017) between real and generated images from pool3 features of a *local* Inception-v3
    weights file (pytorch-fid ``pt_inception-2015-12-05-*.pth`` or torchvision ``inception_v3_google-*.pth``).
    Never downloads: a missing file raises FileNotFoundError naming it.  Images: ``[n, 1|3, H, W]`` in [0, 1]."""
    p = Path(weights_path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"Inception weights file {p} not found: Inception FID runs only with a local weights file "
                                "(pytorch-fid pt_inception-2015-12-05-6726825d.pth or torchvision inception_v3_google-*.pth); "
                                "nothing is downloaded")
    xr, xf = _pixels(real_x, "real_x"), _pixels(fake_x, "fake_x")
    net, blocks = _load_inception(p)
    feats = [_batched(lambda b: net(inception_preprocess(b)), t, batch_size).double().numpy() for t in (xr, xf)]
    return {"metric": "inception_fid", "inception_fid": frechet_distance(*feats), "n_real": len(xr), "n_fake": len(xf),
            "weights": str(p), "weights_sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "blocks": blocks}


# ----------------------------------------------------------------------------------------------- 4. helpers
def save_sample_grid(x: Images, y: Images, path: str | os.PathLike[str], per_class: int = 10, pad: int = 2, *,
                     pipeline: str = "", epsilon: float | None = None, detail: str = "",
                     class_names: list[str] | None = None) -> Path:
    """Write a labelled PNG grid (atomically, 900 px wide): one row per class 0..9 with its name on the left
    (``class_names``, default the digits), the first ``per_class`` samples of that class in input order on a
    white background (missing samples stay blank), titled with ``pipeline``, ``epsilon`` and ``detail``
    (:func:`sstq_fl.plots.sample_grid_title`).  Accepts ``[n, 1|3, H, W]`` in [0, 1]."""
    from ..plots import plot_sample_grid, sample_grid_title

    t = _pixels(x, "x")
    if t.ndim != 4 or t.shape[1] not in (1, 3):
        t = as_images(t, "x")
    lab = as_labels(y, len(t), "y").numpy()
    rows = [_class_strip(t[np.nonzero(lab == c)[0][:per_class]], per_class, pad) for c in range(NUM_CLASSES)]
    names = class_names or [str(c) for c in range(NUM_CLASSES)]
    plot_sample_grid(rows, names, path, sample_grid_title(pipeline, epsilon, detail))
    return Path(path)


def _class_strip(imgs: torch.Tensor, per_class: int, pad: int) -> np.ndarray:
    """``imgs`` (``[k ≤ per_class, C, H, W]``) side by side, ``pad`` white pixels apart: ``[H, per_class·(W+pad)−pad, C]``."""
    _, ch, h, w = imgs.shape
    strip = np.ones((h, per_class * (w + pad) - pad, ch), dtype=np.float32)
    for j, img in enumerate(imgs):
        strip[:, j * (w + pad) : j * (w + pad) + w] = img.permute(1, 2, 0).numpy()
    return strip


def membership_auc(member_scores: np.ndarray, nonmember_scores: np.ndarray) -> float:
    """Membership-inference AUC with the convention *lower score = more likely a member* (e.g. a per-record
    loss): AUC = P(s_nonmember > s_member) + ½·P(tie), from the Mann–Whitney rank statistic with average ranks.
    ≈ 0.5 means the attack learns nothing; audits only ever give lower bounds on leakage."""
    from scipy.stats import rankdata

    m, n = np.asarray(member_scores, dtype=np.float64), np.asarray(nonmember_scores, dtype=np.float64)
    if m.ndim != 1 or n.ndim != 1 or m.size == 0 or n.size == 0:
        raise ValueError(f"scores must be non-empty 1-D arrays, got {m.shape} and {n.shape}")
    if not (np.isfinite(m).all() and np.isfinite(n).all()):
        raise ValueError("scores contain NaN or infinite values")
    ranks = rankdata(np.concatenate([m, n]))
    u = ranks[m.size :].sum() - n.size * (n.size + 1) / 2
    return float(u / (m.size * n.size))
