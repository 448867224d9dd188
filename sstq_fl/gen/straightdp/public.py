"""StraightDP's public side: everything calibrated on public Fashion-MNIST before any private record is read.

The PCA basis ``P`` and mean ``m_pub`` (the feature space of the moment release; in the latent space ``P = I``,
``m_pub = 0`` on the latents of the frozen public autoencoder, :mod:`~sstq_fl.gen.straightdp.autoencoder`), the
feature bound ``R_f`` (a
public norm quantile), the time split ``τ`` and the guidance start ``t₀`` (from the agreement between the public
data's analytic mixture field and its empirical field, :func:`~sstq_fl.gen.straightdp.field.calibrate_times`), the
flow model pretrained on public data with byte captions, and THA's public gradient-norm probe.  Reading every
calibration constant from public data only is what keeps them out of the privacy analysis; the PCA feature space,
the τ-knee rule and the probe are our own choices.
"""

from __future__ import annotations

import hashlib
import io
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...config.straightdp import StraightConfig
from ...io import atomic_write_bytes
from ...progress import progress
from ..dpsgd import example_loss
from .flow import to_model_space, to_pixels

log = logging.getLogger("sstq_fl.gen")
PIPELINE = StraightConfig.WORKLOAD
FLOOR = 1e-2  # λ₀, the eigenvalue floor of the released covariance
PROBE_PER_BUCKET = 32


@dataclass(frozen=True)
class PublicCalibration:
    """Everything calibrated on public data before any private record is read."""

    basis: np.ndarray  # P [p, D]
    mean: np.ndarray  # m_pub [D]
    r_f: float
    tau: float
    t0: float
    tau_curve: dict[str, list[float]]
    field: Any  # the public data's analytic field (THA's V̄(t))
    replay_x: np.ndarray  # public records as the flow takes them: images [n, 1, 28, 28] or latents [n, 2, 4, 4]
    replay_y: np.ndarray
    autoencoder: Any = None  # the frozen public autoencoder of the latent space (None: pixel space)
    autoencoder_sha256: str | None = None

    @property
    def space(self) -> str:
        """``pixel`` or ``latent`` (where the features, moments, field and flow live)."""
        return "pixel" if self.autoencoder is None else "latent"

    @property
    def encoder_payload(self) -> dict[str, np.ndarray]:
        """What the clients need besides ``P``, ``m_pub``: the frozen encoder's weights (latent space), else nothing."""
        from .autoencoder import encoder_payload

        return {} if self.autoencoder is None else encoder_payload(self.autoencoder)

    def to_images(self, z: Any) -> torch.Tensor:
        """Model-space samples (flat or shaped) → images ``[n, 1, 28, 28]`` in [0, 1], not clamped: ``(z + 1)/2``
        (pixel) or the frozen decoder's ``(G(z) + 1)/2`` (latent)."""
        from .autoencoder import decode_latents

        zt = torch.as_tensor(z, dtype=torch.float32).cpu()
        if self.autoencoder is None:
            return to_pixels(zt.reshape(zt.shape[0], 1, 28, 28))  # type: ignore[no-any-return]
        return decode_latents(self.autoencoder, zt)

    @property
    def probe_x(self) -> np.ndarray:
        """The first public images, THA's gradient-norm probe."""
        return self.replay_x[:PROBE_PER_BUCKET]

    @property
    def probe_y(self) -> np.ndarray:
        return self.replay_y[:PROBE_PER_BUCKET]


def public_calibration(cfg: StraightConfig, public_x: np.ndarray, public_y: np.ndarray) -> PublicCalibration:
    """``P``, ``m_pub`` (public PCA, ``p`` rows; latent space: ``P = I₃₂``, ``m_pub = 0``), ``R_f`` (the 0.99 quantile
    of public feature norms), and ``τ``, ``t₀`` from the cosine between the public data's own (noiseless) mixture
    field and its empirical field over ``t`` (:func:`~.field.field_agreement`; τ its time-weighted knee, t₀ its
    plateau edge, computed in the run's space), unless given."""
    from . import field as fld
    from .moments import norm_quantile, public_mixture, public_pca

    ae, sha = public_latent_model(cfg, public_x) if cfg.space == "latent" else (None, None)
    if ae is None:
        flat = to_model_space(public_x.reshape(len(public_x), -1).astype(np.float64))  # [−1, 1], as the clients
        basis, mean = public_pca(flat, cfg.resolved("pca"))
        replay = public_x
    else:
        from .autoencoder import LATENT_DIM, LATENT_SHAPE, encode_images

        flat = encode_images(ae, public_x)  # the latents, as the clients encode theirs
        basis, mean = np.eye(LATENT_DIM), np.zeros(LATENT_DIM)
        replay = flat.astype(np.float32).reshape(len(flat), *LATENT_SHAPE)
    r_f = float(norm_quantile(flat, basis, mean, 0.99))
    public_field = fld.AnalyticField(public_mixture(flat, public_y, basis, mean, r_f, cfg.resolved("rank"), FLOOR))
    tau, t0, cos = fld.calibrate_times(public_field, flat, public_y, seed=cfg.seed)
    curve = {"t": list(fld.DEFAULT_TS), "cosine": [float(c) for c in cos]}
    tau, t0 = (cfg.tau if cfg.tau is not None else tau), (cfg.t0 if cfg.t0 is not None else t0)
    return PublicCalibration(basis, mean, r_f, float(tau), float(t0), curve, public_field, replay, public_y, ae, sha)


def public_latent_model(cfg: StraightConfig, public_x: np.ndarray) -> tuple[Any, str]:
    """The frozen autoencoder of the latent space, trained on the run's public images (the profile's
    ``ae_steps``/``ae_batch``), cached in ``cache_dir``; with the sha256 of its weights file."""
    from .autoencoder import AutoencoderSettings, public_autoencoder

    settings = AutoencoderSettings(cfg.resolved("ae_steps"), cfg.resolved("ae_batch"), seed=cfg.seed)
    with progress(settings.steps, f"{PIPELINE} public autoencoder") as bar:
        return public_autoencoder(public_x, settings, cfg.cache_dir, cfg.device,
                                  progress=lambda s, loss: bar.update(s, loss=loss))


def flow_config(cfg: StraightConfig, t_min: float = 0.0, t_max: float = 1.0) -> Any:
    """The backbone's hyperparameters (the profile's) with the run's low-B₀ flag, multiplicity and t range."""
    from .flow import FlowConfig

    return FlowConfig.profile(cfg.profile, low_b0=cfg.low_b0, multiplicity=cfg.resolved("multiplicity"),
                              t_min=t_min, t_max=t_max, space=cfg.space)


def pretrain_steps(cfg: StraightConfig) -> int:
    """Public pretraining steps: the given ones, else the profile's for the space (latent: 12k full)."""
    if cfg.pretrain_steps is not None or cfg.space == "pixel":
        return int(cfg.resolved("pretrain_steps"))
    return int(cfg.resolved("latent_pretrain_steps"))


def _pretrain_key(cfg: StraightConfig, public_x: np.ndarray) -> str:
    """The pretraining cache's key: the backbone, every pretraining setting, the seed and the public images."""
    settings = (replace(flow_config(cfg), multiplicity=1), pretrain_steps(cfg),
                cfg.resolved("pretrain_batch"), cfg.resolved("pretrain_lr"), cfg.resolved("pretrain_ema"), cfg.seed,
                public_x.shape)
    h = hashlib.sha256(repr(settings).encode())
    h.update(np.ascontiguousarray(public_x[:: max(1, len(public_x) // 512)]).tobytes())
    return h.hexdigest()[:20]


def pretrained_flow(cfg: StraightConfig, public_x: np.ndarray, public_y: np.ndarray) -> Any:
    """The flow model pretrained on public Fashion-MNIST (EMA weights, captions frozen), cached in ``cache_dir`` by
    its settings (a public computation: the cache holds public weights only; ``weights_only`` loads).
    ``public_x``: the public records as the flow takes them (:attr:`PublicCalibration.replay_x`)."""
    from .flow import FlowModel
    from .training import pretrain

    path = Path(cfg.cache_dir) / f"pretrain-{_pretrain_key(cfg, public_x)}.pt"
    model = FlowModel(flow_config(cfg), frozen_captions=True)
    if path.is_file():
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        log.info("%s: public pretraining reused from %s", PIPELINE, path)
        return model.to(cfg.device)
    steps = pretrain_steps(cfg)
    with progress(steps, f"{PIPELINE} public pretraining") as bar:  # one (t, ξ) draw per image: batch = images
        trained, _ = pretrain(torch.as_tensor(public_x), torch.as_tensor(public_y),
                              replace(flow_config(cfg), multiplicity=1), steps,
                              cfg.resolved("pretrain_batch"), lr=cfg.resolved("pretrain_lr"),
                              ema=cfg.resolved("pretrain_ema"), seed=cfg.seed, device=cfg.device,
                              progress=lambda s, n, loss: bar.update(s, loss=loss))
    trained.freeze_captions()
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in trained.state_dict().items()}, buf)
    atomic_write_bytes(path, buf.getvalue())
    return trained.to(cfg.device)



def range_model(model: Any, cfg: StraightConfig, t_min: float, t_max: float) -> Any:
    """A copy of ``model`` whose per-example noise draws ``t ~ U[t_min, t_max]`` (what a client builds for a bucket)."""
    from .flow import FlowModel

    twin = FlowModel(flow_config(cfg, t_min, t_max), frozen_captions=True).to(cfg.device)
    twin.load_state_dict(model.state_dict())
    return twin.train()


def public_grad_norms(model: Any, cfg: StraightConfig, pub: PublicCalibration, edges: np.ndarray) -> list[np.ndarray]:
    """Per-sample gradient norms of the flow-matching loss on public probe images, one array per bucket of
    ``edges`` (the pretrained model; public data only: γ and the β proxy of THA)."""
    from torch.func import grad, vmap

    gen = torch.Generator().manual_seed(cfg.seed + 11)
    x = torch.as_tensor(pub.probe_x, device=cfg.device)
    y = torch.as_tensor(pub.probe_y, device=cfg.device)
    out = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        twin = range_model(model, cfg, float(lo), float(hi))
        params = {k: v.detach() for k, v in twin.named_parameters()}
        buffers = {k: v.detach() for k, v in twin.named_buffers()}
        noise = twin.draw_noise(len(y), gen).to(cfg.device)
        g = vmap(grad(example_loss(twin, buffers)), in_dims=(None, 0, 0, 0))(params, x, y, noise)
        out.append(torch.sqrt(sum(v.reshape(len(y), -1).pow(2).sum(1) for v in g.values())).cpu().numpy())
    return out
