"""DP-MEPF's client task (Harder et al., TMLR 2023, mapped onto simulated clients): ``mepf.class_sums``.

Each client receives the public feature extractor Φ as arrays (``phi/<name>``: public weights, no pickle),
embeds **its own** records, unit-normalises the moments per record and returns the per-class counts and sums;
the server adds Gaussian noise once (:meth:`~sstq_fl.gen.runner.DPRunner.additive_release`).
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn

from ...config.mepf import parse_ints
from ..releases import AGGREGATOR_RELEASE
from ..runner import Arrays, ClientContext, Scalar, register_client_task
from .features import FeatureExtractor, embedded_class_sums

_EXTRACTORS: dict[tuple[str, str, str], FeatureExtractor] = {}  # (sha256 of the weights, profile, device) -> Φ


def _extractor(payload: Arrays, profile: str, device: str) -> FeatureExtractor:
    """The broadcast Φ, rebuilt once per process (a client answers many requests with the same Φ)."""
    state = {k[4:]: v for k, v in sorted(payload.items()) if k.startswith("phi/")}
    h = hashlib.sha256()
    for v in state.values():
        h.update(np.ascontiguousarray(v).tobytes())
    key = (h.hexdigest(), profile, device)
    if key not in _EXTRACTORS:
        fx = FeatureExtractor(profile)
        fx.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
        _EXTRACTORS.clear()
        _EXTRACTORS[key] = fx.to(torch.device(device)).eval().requires_grad_(False)
    return _EXTRACTORS[key]


def extractor_payload(fx: nn.Module) -> Arrays:
    """Φ's state dict as broadcast arrays (``phi/<name>``): public weights, no pickle."""
    return {f"phi/{k}": v.detach().cpu().numpy() for k, v in fx.state_dict().items()}


@register_client_task("mepf.class_sums", AGGREGATOR_RELEASE)
def mepf_class_sums(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """DP-MEPF's labelled statistics on the client: apply the broadcast public Φ, unit-normalise the moments
    per record, and sum per class."""
    fx = _extractor(payload, str(config["profile"]), ctx.device)
    moments = parse_ints(str(config["moments"]))
    counts, sums = embedded_class_sums(fx, ctx.x, ctx.y, moments)
    return {"counts": counts.cpu().numpy(), "sums": sums.cpu().numpy()}
