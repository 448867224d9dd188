"""StraightDP's public side: everything calibrated on public Fashion-MNIST before any private record is read.

The PCA basis ``P`` and mean ``m_pub`` (the feature space of the moment release), the feature bound ``R_f`` (a
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

from ...io import atomic_write_bytes
from ...progress import progress
from ..dpsgd import example_loss
from .config import StraightConfig
from .flow import to_model_space

log = logging.getLogger("sstq_fl.gen")
PIPELINE = "straightdp"
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
    replay_x: np.ndarray  # public images for distillation's replay batch [n, 1, 28, 28]
    replay_y: np.ndarray

    @property
    def probe_x(self) -> np.ndarray:
        """The first public images, THA's gradient-norm probe."""
        return self.replay_x[:PROBE_PER_BUCKET]

    @property
    def probe_y(self) -> np.ndarray:
        return self.replay_y[:PROBE_PER_BUCKET]


def public_calibration(cfg: StraightConfig, public_x: np.ndarray, public_y: np.ndarray) -> PublicCalibration:
    """``P``, ``m_pub`` (public PCA, ``p`` rows), ``R_f`` (the 0.99 quantile of public feature norms), and ``τ``,
    ``t₀`` from the cosine between the public data's own (noiseless) mixture field and its empirical field over
    ``t`` (:func:`~.field.field_agreement`; τ its time-weighted knee, t₀ its plateau edge), unless given."""
    from . import field as fld
    from .moments import norm_quantile, public_mixture, public_pca

    flat = to_model_space(public_x.reshape(len(public_x), -1).astype(np.float64))  # [−1, 1], as the clients
    basis, mean = public_pca(flat, cfg.resolved("pca"))
    r_f = float(norm_quantile(flat, basis, mean, 0.99))
    public_field = fld.AnalyticField(public_mixture(flat, public_y, basis, mean, r_f, cfg.resolved("rank"), FLOOR))
    tau, t0, cos = fld.calibrate_times(public_field, flat, public_y, seed=cfg.seed)
    curve = {"t": list(fld.DEFAULT_TS), "cosine": [float(c) for c in cos]}
    tau, t0 = (cfg.tau if cfg.tau is not None else tau), (cfg.t0 if cfg.t0 is not None else t0)
    return PublicCalibration(basis, mean, r_f, float(tau), float(t0), curve, public_field, public_x, public_y)


def flow_config(cfg: StraightConfig, t_min: float = 0.0, t_max: float = 1.0) -> Any:
    """The backbone's hyperparameters (the profile's) with the run's low-B₀ flag, multiplicity and t range."""
    from .flow import FlowConfig

    return FlowConfig.profile(cfg.profile, low_b0=cfg.low_b0, multiplicity=cfg.resolved("multiplicity"),
                              t_min=t_min, t_max=t_max)


def _pretrain_key(cfg: StraightConfig, public_x: np.ndarray) -> str:
    """The pretraining cache's key: the backbone, every pretraining setting, the seed and the public images."""
    settings = (replace(flow_config(cfg), multiplicity=1), cfg.resolved("pretrain_steps"),
                cfg.resolved("pretrain_batch"), cfg.resolved("pretrain_lr"), cfg.resolved("pretrain_ema"), cfg.seed,
                public_x.shape)
    h = hashlib.sha256(repr(settings).encode())
    h.update(np.ascontiguousarray(public_x[:: max(1, len(public_x) // 512)]).tobytes())
    return h.hexdigest()[:20]


def pretrained_flow(cfg: StraightConfig, public_x: np.ndarray, public_y: np.ndarray) -> Any:
    """The flow model pretrained on public Fashion-MNIST (EMA weights, captions frozen), cached in ``cache_dir`` by
    its settings (a public computation: the cache holds public weights only; ``weights_only`` loads)."""
    from .flow import FlowModel
    from .training import pretrain

    path = Path(cfg.cache_dir) / f"pretrain-{_pretrain_key(cfg, public_x)}.pt"
    model = FlowModel(flow_config(cfg), frozen_captions=True)
    if path.is_file():
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        log.info("%s: public pretraining reused from %s", PIPELINE, path)
        return model.to(cfg.device)
    steps = cfg.resolved("pretrain_steps")
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
