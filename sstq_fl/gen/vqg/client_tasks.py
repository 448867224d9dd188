"""DP-VQG's client task (Stage II on the clients; runner: :mod:`sstq_fl.gen.runner`).

* ``vqg.tokens`` — Stage II on the client.  The client receives the frozen tokenizer Θ (its state
  as arrays, ``theta/<name>``) and the calibrated ``ε₀`` and ``ε_y``, encodes **its own** records
  (``z̄_l = Π_1(E(x)_l)``, R = 1) and releases, per location ``l``, one code drawn by the
  exponential mechanism over **all** ``K`` codes (McSherry & Talwar 2007),

      P(k) ∝ exp(ε₀ · u_l(k) / (2Δu)),   u_l(k) = −‖z̄_l − c̄_k‖² ∈ [−4R², 0],   Δu = 4R²,

  sampled by Gumbel-max in float64 (:func:`~sstq_fl.gen.vqg.mechanism.release_tokens`) from the
  client's **protective** uniforms (:meth:`~sstq_fl.gen.runner.ClientContext.uniform`: under
  ``randomness="secure"`` ChaCha20 keyed by the client's own OS-CSPRNG key, never sent), and its
  label by ``k``-ary randomized response at ``ε_y`` (Warner, JASA 1965; keep with ``e^ε/(e^ε+k−1)``), or
  the true label when the run declares labels public (``ε_y = 0``; the run says so).  It returns
  only the rows ``(tokens [n, HW], label [n])``.  The uniforms (``n·HW·K`` of them) are drawn in
  chunks of records so memory stays bounded (:func:`chunk_records`).  ``ε₀ = ∞`` is the
  non-private reference (argmin tokens, true labels: **not DP**).

FP-VQG's Stage I at ``ε = ∞`` (the non-private reference) uses the shared ``dpsgd.sampled_clipped_sum``
(:mod:`sstq_fl.gen.dpsgd`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from ...privacy.events import PrivacyEvent
from ..releases import ldp_release, plan_event
from ..runner import Arrays, ClientContext, Scalar, register_client_task
from . import tokenizer as vqt
from .mechanism import argmin_tokens, release_tokens, rr_labels, stage2_plan

PREFIX = "theta/"
NUM_CLASSES = 10
RADIUS = 1.0  # R: tokens and codes are unit-normalised in the architecture (FP-VQG)
CHUNK_ELEMENTS = 1 << 22  # uniforms per chunk (n·HW·K float64 values: 32 MiB)
_TOKENIZERS: dict[tuple[str, str, str], vqt.VQTokenizer] = {}  # (sha256 of Θ, profile, device) -> Θ


def tokenizer_payload(model: nn.Module) -> Arrays:
    """Θ's state dict as broadcast arrays (``theta/<name>``): released weights, no pickle."""
    return {f"{PREFIX}{k}": v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def _digest(state: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k, v in state.items():
        h.update(k.encode())
        h.update(np.ascontiguousarray(v).tobytes())
    return h.hexdigest()


def client_tokenizer(payload: Arrays, profile: str, device: str) -> vqt.VQTokenizer:
    """The broadcast Θ, rebuilt once per process and Θ (a client may answer several requests with it)."""
    state = {k[len(PREFIX):]: v for k, v in sorted(payload.items()) if k.startswith(PREFIX)}
    key = (_digest(state), profile, device)
    if key not in _TOKENIZERS:
        model = vqt.VQTokenizer(vqt.TokenizerConfig.profile(profile))
        model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
        _TOKENIZERS.clear()
        _TOKENIZERS[key] = model.to(torch.device(device)).eval().requires_grad_(False)
    return _TOKENIZERS[key]


def chunk_records(codebook_size: int, hw: int | None = None, elements: int = CHUNK_ELEMENTS) -> int:
    """Records per chunk, ``max(1, ⌊elements / (HW·K)⌋)``: each chunk draws ``m·HW·K`` uniforms (K = 64: 1,337
    records; K = 1,024: 83), so the float64 uniforms, logits and Gumbel noise stay within a few times 32 MiB."""
    return max(1, elements // ((hw or vqt.HW) * codebook_size))


@torch.no_grad()
def em_token_maps(ctx: ClientContext, model: vqt.VQTokenizer, eps0: float, chunk: int) -> np.ndarray:
    """The released token maps ``[n, HW]`` of the client's records: per-location EM at ``ε₀`` over all ``K``
    codes, chunk by chunk, each chunk's ``m·HW·K`` uniforms a fresh protective draw (``ε₀ = ∞``: argmin, not DP)."""
    codes = model.codes().double()
    k, hw = codes.shape[0], vqt.HW
    out = [np.zeros((0, hw), dtype=np.int64)]
    for i in range(0, len(ctx.x), chunk):
        z = model.encode_tokens(torch.as_tensor(ctx.x[i:i + chunk], device=codes.device)).double()
        if eps0 == math.inf:
            out.append(argmin_tokens(z, codes, RADIUS))
            continue
        u = ctx.uniform("em-tokens", z.shape[0] * hw * k).reshape(z.shape[0], hw, k)
        out.append(release_tokens(z, codes, eps0, RADIUS, u))
    return np.concatenate(out)


def released_labels(ctx: ClientContext, eps_y: float, labels: str) -> np.ndarray:
    """The client's labels as released: k-ary RR at ``ε_y`` (two protective uniforms per record), or the true
    labels when ``labels == "public"`` (``ε_y = 0``, declared) or ``ε_y = ∞`` (the non-private reference)."""
    y = np.asarray(ctx.y, dtype=np.int64)
    if labels == "public" or eps_y == math.inf:
        return y.copy()
    return rr_labels(y, eps_y, NUM_CLASSES, ctx.uniform("label-rr", 2 * len(y)).reshape(len(y), 2))


def tokens_event(config: Mapping[str, Any], out: Mapping[str, np.ndarray]) -> PrivacyEvent:
    """What one record's row released, computed by the client from what it applied: ``HW`` EM draws at ``ε₀``
    and the label's RR at ``ε_y`` (:func:`~sstq_fl.gen.vqg.mechanism.stage2_plan`).  True labels sent because
    the request calls them public are, for the client, labels sent without protection (``ε_y = ∞``): the
    server's word that they are public data is not the client's guarantee."""
    labels, eps_y = str(config.get("labels", "private")), float(config["eps_y"])
    return plan_event(stage2_plan(float(config["eps0"]), int(out["tokens"].shape[1]),
                                  math.inf if labels == "public" else eps_y))


@register_client_task("vqg.tokens", ldp_release(tokens_event))
def vqg_tokens(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """Stage II on one client (module docstring): only ``{"tokens": [n, HW], "labels": [n]}`` leave it.

    ``config``: ``profile`` (Θ's architecture), ``eps0`` (per location; ``inf``: argmin, not DP), ``eps_y``
    (label RR; 0 with ``labels="public"``), ``labels`` (``private`` | ``public``), ``chunk`` (records per draw)."""
    profile, labels = str(config["profile"]), str(config.get("labels", "private"))
    if labels not in ("private", "public"):
        raise ValueError(f"labels must be 'private' or 'public', got {labels!r}")
    model = client_tokenizer(payload, profile, ctx.device)
    chunk = int(config.get("chunk", chunk_records(model.cfg.codebook_size)))
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1 record, got {chunk}")
    tokens = em_token_maps(ctx, model, float(config["eps0"]), chunk)
    return {"tokens": tokens, "labels": released_labels(ctx, float(config["eps_y"]), labels)}
