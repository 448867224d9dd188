"""StraightDP's client tasks, registered next to the pipeline's code.

Every client receives the **public** calibration (the PCA basis ``P`` ``[p, D]``, the public mean ``m_pub``
and the feature bound ``R_f``, all of them from public data only) and sends sums over its own
records of bounded per-record contributions; the server adds Gaussian noise once
(:meth:`~sstq_fl.gen.runner.DPRunner.additive_release`).

* ``straightdp.class_moments`` — counts and whitened per-class sums: record ``i`` contributes
  ``(e_{y_i}, f_i/(2R_f))`` with ``f_i = clip_{R_f}(P(z_i − m_pub))``, of norm ``≤ √(1 + 1/4) = √5/2``,
  the add/remove shift the release declares.  The contribution is clipped to ``config["bound"]`` on the client
  all the same (a no-op for ``bound = √5/2``), so the declared bound holds whatever ``R_f`` says.
* ``straightdp.second_moment`` — ``Σ_i f_i f_iᵀ`` (``p × p``, never the ambient ``D × D``), each term of
  Frobenius norm ``‖f_i‖² ≤ R_f²``, clipped on the client to ``config["bound"]`` (the pipeline passes
  ``R_f²``, the add/remove Frobenius shift).

The flow model's DP-SGD rounds use the shared ``dpsgd.clipped_sum`` with the model ``"straightdp-flow"``
(:mod:`sstq_fl.gen.straightdp.flow`).

Latent space (:mod:`~sstq_fl.gen.straightdp.autoencoder`): the payload also carries the frozen public encoder
(``ae/<name>``); each client encodes its own records with it, ``z_i = E(2x_i − 1)`` (32-d), and the feature is
``f_i = clip_R(z_i)`` (the broadcast ``P = I``, ``m_pub = 0``).  ``straightdp.latent_clipped_sum`` and
``straightdp.latent_sampled_clipped_sum`` are ``dpsgd.clipped_sum`` and ``dpsgd.sampled_clipped_sum`` on the
client's latents ``[n, 2, 4, 4]`` (the same Poisson coins, clip and reply).  A client keeps its latents for the
broadcast encoder it was given (they are a function of its records and public weights only).
"""

from __future__ import annotations

import hashlib

import numpy as np

from ...privacy.clipping import clip_rows
from ..dpsgd import dpsgd_clipped_sum, sampled_clipped_sum
from ..releases import AGGREGATOR_RELEASE
from ..runner import Arrays, ClientContext, Scalar, register_client_task
from . import flow  # registers the model "straightdp-flow"
from .autoencoder import LATENT_SHAPE, client_encoder, encode_images, encoder_digest, split_payload
from .moments import features, second_moment_sum

_LATENTS: dict[tuple[str, str], np.ndarray] = {}  # (encoder digest, records digest) -> the records' latents
_MAX_CACHED = 64


def client_latents(ctx: ClientContext, encoder: dict[str, np.ndarray]) -> np.ndarray:
    """The client's records encoded by the broadcast frozen encoder, ``E(2x − 1)`` ``[n, 32]`` float64 (computed
    once per encoder and records, then reused by every round)."""
    key = (encoder_digest(encoder), hashlib.blake2b(np.ascontiguousarray(ctx.x).tobytes()).hexdigest())
    if key not in _LATENTS:
        if len(_LATENTS) >= _MAX_CACHED:
            _LATENTS.clear()
        _LATENTS[key] = encode_images(client_encoder(encoder), ctx.x)
    return _LATENTS[key]


def client_features(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> np.ndarray:
    """``f_i = clip_{R_f}(P(z_i − m_pub))`` of this client's records with the broadcast public ``P``, ``m_pub``:
    ``z_i = 2x_i − 1`` (StraightDP's [−1, 1] pixels), or with an encoder in the payload ``z_i = E(2x_i − 1)``."""
    encoder, rest = split_payload(payload)
    p, m_pub = np.asarray(rest["P"], dtype=np.float64), np.asarray(rest["m_pub"], dtype=np.float64)
    if p.ndim != 2 or m_pub.shape != (p.shape[1],):
        raise ValueError(f"payload: P must be [p, D] and m_pub [D]; got {p.shape}, {m_pub.shape}")
    if encoder:
        z = client_latents(ctx, encoder)
    else:
        z = flow.to_model_space(ctx.x.reshape(len(ctx.x), -1).astype(np.float64))
    return features(z, p, m_pub, float(config["r_f"]))


@register_client_task("straightdp.class_moments", AGGREGATOR_RELEASE)
def class_moments(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """``{"counts": [Y], "sums_w": [Y, p]}``: Σ over own records of ``(e_y, f/(2R_f))``, each record's joint
    contribution clipped to ``bound`` (module docstring)."""
    f = client_features(ctx, payload, config)
    classes, r_f = int(config.get("classes", 10)), float(config["r_f"])
    joint = np.concatenate([np.eye(classes)[ctx.y], f / (2 * r_f)], axis=1)
    joint = clip_rows(joint, float(config["bound"]))
    sums = np.zeros((classes, joint.shape[1]))
    np.add.at(sums, ctx.y, joint)
    return {"counts": sums[:, :classes].sum(0), "sums_w": sums[:, classes:]}


@register_client_task("straightdp.second_moment", AGGREGATOR_RELEASE)
def second_moment(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """``{"m2": Σ_i f_i f_iᵀ}`` over own records, each ``f_i f_iᵀ`` clipped to Frobenius norm ``bound``."""
    f = client_features(ctx, payload, config)
    bound = float(config["bound"])
    norms2 = (f * f).sum(1)  # ‖f fᵀ‖_F = ‖f‖²
    f = f * np.sqrt(np.minimum(1.0, bound / np.maximum(norms2, 1e-300)))[:, None]
    return {"m2": second_moment_sum(f)}


def _latent_context(ctx: ClientContext, payload: Arrays) -> tuple[ClientContext, Arrays]:
    """The same client and request with its records replaced by their latents ``[n, 2, 4, 4]``, and the payload
    without the encoder (the flow model's state only)."""
    encoder, rest = split_payload(payload)
    if not encoder:
        raise ValueError("payload: a latent DP-SGD round needs the frozen encoder (ae/...)")
    z = client_latents(ctx, encoder).astype(np.float32).reshape(len(ctx.x), *LATENT_SHAPE)
    return ClientContext(ctx.cid, z, ctx.y, ctx.seed, ctx.round, ctx.device, ctx.randomness), rest


@register_client_task("straightdp.latent_clipped_sum", AGGREGATOR_RELEASE)
def latent_clipped_sum(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """``dpsgd.clipped_sum`` on the client's latents: Poisson sampling at ``q``, the per-example flow-matching loss
    of the latent model, each gradient clipped to ``clip``, the sum (zero if nothing was sampled)."""
    return dpsgd_clipped_sum(*_latent_context(ctx, payload), config)


@register_client_task("straightdp.latent_sampled_clipped_sum", AGGREGATOR_RELEASE)
def latent_sampled_clipped_sum(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """``dpsgd.sampled_clipped_sum`` on the client's latents (the ``ε = ∞`` reference's rounds)."""
    return sampled_clipped_sum(*_latent_context(ctx, payload), config)
