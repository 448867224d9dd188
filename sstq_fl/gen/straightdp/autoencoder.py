"""StraightDP's latent space: a frozen convolutional autoencoder trained on public Fashion-MNIST only.

The latent variant runs the whole pipeline (moment release, analytic field, distillation, guidance, DP-SGD flow
matching) on ``d = 32`` latents, shaped ``2 × 4 × 4`` for the flow model's 16 tokens (patch 1), and decodes its
samples back to pixels; working in a frozen autoencoder's latent space is the latent-diffusion recipe of Rombach,
Blattmann, Lorenz, Esser & Ommer ("High-Resolution Image Synthesis with Latent Diffusion Models", CVPR 2022), and
the per-record feature there is the plain ``f = clip_R(z)`` of the latent (``P = I``, no centering).

Architecture (our choice; no normalisation layers, so nothing couples examples):

* encoder ``E``: conv 3×3/2 (1 → 32, 28 → 14), SiLU, conv 3×3/2 (32 → 64, 14 → 7), SiLU, conv 3×3 (64 → 64), SiLU,
  linear 3136 → 32, then ``tanh``: every latent coordinate lies in ``(−1, 1)``, so ``‖z‖ < √32`` and the latents
  are O(1) like the flow's noise ``ξ ~ N(0, I)``;
* decoder ``G``: linear 32 → 3136, SiLU, transposed conv 4×4/2 (64 → 32, 7 → 14), SiLU, transposed conv 4×4/2
  (32 → 16, 14 → 28), SiLU, conv 3×3 (16 → 1), ``tanh``: StraightDP's pixel scale [−1, 1].

Training (public data only): Adam on the pixel MSE ``‖G(E(x) + ν) − x‖²``, ``x = 2·image − 1``, with a small
Gaussian perturbation ``ν ~ N(0, 0.05²I)`` of the latent so the decoder stays smooth around the data (samples of
the released Gaussians land between training latents).  The trained weights are cached in the pipeline's cache
folder by a key of every setting and the public images, written atomically; the file's sha256 goes to
``metrics.json``.
"""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ...config.straightdp import LATENT_DIM
from ...io import atomic_write_bytes
from ..tensors import check_images, seeded

log = logging.getLogger("sstq_fl.gen")
LATENT_SHAPE = (2, 4, 4)
"""The latent of one record as the flow model sees it: 2 channels on a 4 × 4 grid (16 tokens of patch 1); its
product is ``d``, :data:`~sstq_fl.config.straightdp.LATENT_DIM` (the moment release's ``p``)."""
LATENT_NOISE = 0.05
"""Std of the latent perturbation in training (our choice)."""
AE_LR = 1e-3
"""Adam's learning rate (our choice)."""
AE_VERSION = 1
PREFIX = "ae/"
_HIDDEN = (64, 7, 7)


class ConvAutoencoder(nn.Module):
    """``E``: ``[n, 1, 28, 28]`` in [−1, 1] → ``[n, 32]`` in (−1, 1); ``G``: ``[n, 32]`` → ``[n, 1, 28, 28]`` in [−1, 1]
    (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        width = int(np.prod(_HIDDEN))
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 32, 3, stride=2, padding=1), nn.SiLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.SiLU(), nn.Flatten(), nn.Linear(width, LATENT_DIM), nn.Tanh())
        self.decoder = nn.Sequential(
            nn.Linear(LATENT_DIM, width), nn.SiLU(), nn.Unflatten(1, _HIDDEN),
            nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1), nn.SiLU(),
            nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1), nn.SiLU(), nn.Conv2d(16, 1, 3, padding=1), nn.Tanh())

    def encode(self, x: Tensor) -> Tensor:
        """``E(x)`` ``[n, 32]`` for pixels ``x`` in [−1, 1] (any shape with 784 values per row)."""
        return self.encoder(x.reshape(x.shape[0], 1, 28, 28))  # type: ignore[no-any-return]

    def decode(self, z: Tensor) -> Tensor:
        """``G(z)`` ``[n, 1, 28, 28]`` in [−1, 1] for latents ``z`` (any shape with 32 values per row)."""
        return self.decoder(z.reshape(z.shape[0], LATENT_DIM))  # type: ignore[no-any-return]

    def forward(self, x: Tensor) -> Tensor:
        return self.decode(self.encode(x))


@torch.no_grad()
def encode_images(model: ConvAutoencoder, images: Any, batch: int = 1000) -> np.ndarray:
    """Latents ``[n, 32]`` float64 of images in [0, 1] (records as stored): ``E(2x − 1)``, in batches."""
    x = check_images(images, "images")
    dev = next(model.parameters()).device
    out = [model.encode(2 * xb.to(dev) - 1).double().cpu() for xb in x.split(batch)]
    return torch.cat(out).numpy() if out else np.zeros((0, LATENT_DIM))


@torch.no_grad()
def decode_latents(model: ConvAutoencoder, z: Any, batch: int = 1000) -> Tensor:
    """Images ``[n, 1, 28, 28]`` in [0, 1] from latents: ``(G(z) + 1)/2``, in batches (float32, CPU)."""
    zt = torch.as_tensor(z, dtype=torch.float32).reshape(-1, LATENT_DIM)
    dev = next(model.parameters()).device
    out = [((model.decode(zb.to(dev)) + 1) / 2).float().cpu() for zb in zt.split(batch)]
    return torch.cat(out) if out else torch.zeros(0, 1, 28, 28)


# ----------------------------------------------------------------------------------------------- training
@dataclass(frozen=True)
class AutoencoderSettings:
    """Everything the trained weights depend on besides the images: steps, batch, seed, Adam's lr, the latent noise."""

    steps: int
    batch: int
    seed: int = 0
    lr: float = AE_LR
    noise: float = LATENT_NOISE

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch < 1 or not self.lr > 0 or not self.noise >= 0:
            raise ValueError(f"autoencoder: need steps >= 1, batch >= 1, lr > 0, noise >= 0; got {self.steps}, "
                             f"{self.batch}, {self.lr}, {self.noise}")


def train_autoencoder(images: Any, settings: AutoencoderSettings, device: str = "cpu",
                      progress: Callable[[int, float], None] | None = None) -> ConvAutoencoder:
    """Adam on the pixel MSE of ``G(E(x) + ν)`` over batches drawn with replacement (module docstring); init,
    batches and ``ν`` from ``settings.seed``.  Returns the model in eval mode with gradients off (frozen)."""
    x = 2 * check_images(images, "public images") - 1
    if x.shape[0] == 0:
        raise ValueError("autoencoder: no public images")
    model = seeded(ConvAutoencoder, settings.seed).to(torch.device(device)).train()
    opt = torch.optim.Adam(model.parameters(), lr=settings.lr)
    gen = torch.Generator().manual_seed(settings.seed)
    for step in range(1, settings.steps + 1):
        xb = x[torch.randint(x.shape[0], (settings.batch,), generator=gen)].to(device)
        z = model.encode(xb)
        z = z + settings.noise * torch.randn(z.shape, generator=gen).to(device)
        loss = (model.decode(z) - xb).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if progress is not None:
            progress(step, float(loss.detach()))
    return model.eval().requires_grad_(False)


def cache_key(settings: AutoencoderSettings, images: np.ndarray) -> str:
    """The cache's key: the architecture version, every setting and (a strided sample of) the public images."""
    h = hashlib.sha256(repr((AE_VERSION, settings, images.shape)).encode())
    h.update(np.ascontiguousarray(images[:: max(1, len(images) // 512)]).tobytes())
    return h.hexdigest()[:20]


def _load(blob: bytes) -> ConvAutoencoder:
    model = ConvAutoencoder()
    model.load_state_dict(torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True))
    return model.eval().requires_grad_(False)


def public_autoencoder(images: np.ndarray, settings: AutoencoderSettings, cache_dir: str | Path,
                       device: str = "cpu", progress: Callable[[int, float], None] | None = None
                       ) -> tuple[ConvAutoencoder, str]:
    """The frozen autoencoder of ``images`` (public Fashion-MNIST) and the sha256 of its weights file: read from
    ``cache_dir/autoencoder-<key>.pt`` when present (``weights_only``), else trained and written atomically (a
    public computation: the file holds public weights only)."""
    path = Path(cache_dir) / f"autoencoder-{cache_key(settings, images)}.pt"
    if path.is_file():
        blob = path.read_bytes()
        log.info("straightdp: public autoencoder reused from %s", path)
    else:
        model = train_autoencoder(images, settings, device, progress)
        buf = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buf)
        blob = buf.getvalue()
        atomic_write_bytes(path, blob)
    return _load(blob).to(device), hashlib.sha256(blob).hexdigest()


# ----------------------------------------------------------------------------------------------- broadcast
def encoder_payload(model: ConvAutoencoder) -> dict[str, np.ndarray]:
    """The frozen encoder's weights as broadcast arrays (``ae/<name>``): public weights, no pickle."""
    return {f"{PREFIX}{k}": v.detach().cpu().numpy() for k, v in model.encoder.state_dict().items()}


_ENCODERS: dict[str, ConvAutoencoder] = {}  # sha256 of the broadcast encoder -> the rebuilt model (one per process)


def split_payload(payload: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(encoder arrays without the prefix, the rest)`` of a payload."""
    enc = {k[len(PREFIX):]: v for k, v in payload.items() if k.startswith(PREFIX)}
    return enc, {k: v for k, v in payload.items() if not k.startswith(PREFIX)}


def encoder_digest(state: dict[str, np.ndarray]) -> str:
    """sha256 over the names and bytes of a broadcast encoder's arrays."""
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(np.ascontiguousarray(state[k]).tobytes())
    return h.hexdigest()


def client_encoder(state: dict[str, np.ndarray]) -> ConvAutoencoder:
    """The broadcast encoder (``state`` from :func:`split_payload`), rebuilt once per process and weights; its
    decoder stays at the seed-0 initialisation (a client never decodes)."""
    key = encoder_digest(state)
    if key not in _ENCODERS:
        model = seeded(ConvAutoencoder, 0)
        model.encoder.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
        _ENCODERS.clear()
        _ENCODERS[key] = model.eval().requires_grad_(False)
    return _ENCODERS[key]
