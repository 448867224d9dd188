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
"""

from __future__ import annotations

import numpy as np

from ...privacy.clipping import clip_rows
from ..runner import Arrays, ClientContext, Scalar, register_client_task
from . import flow  # registers the model "straightdp-flow"
from .moments import features, second_moment_sum


def client_features(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> np.ndarray:
    """``f_i = clip_{R_f}(P(z_i − m_pub))`` of this client's records, ``z_i = 2x_i − 1`` (StraightDP's [−1, 1] pixels),
    with the broadcast public ``P``, ``m_pub``."""
    p, m_pub = np.asarray(payload["P"], dtype=np.float64), np.asarray(payload["m_pub"], dtype=np.float64)
    if p.ndim != 2 or m_pub.shape != (p.shape[1],):
        raise ValueError(f"payload: P must be [p, D] and m_pub [D]; got {p.shape}, {m_pub.shape}")
    z = flow.to_model_space(ctx.x.reshape(len(ctx.x), -1).astype(np.float64))
    return features(z, p, m_pub, float(config["r_f"]))


@register_client_task("straightdp.class_moments")
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


@register_client_task("straightdp.second_moment")
def second_moment(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """``{"m2": Σ_i f_i f_iᵀ}`` over own records, each ``f_i f_iᵀ`` clipped to Frobenius norm ``bound``."""
    f = client_features(ctx, payload, config)
    bound = float(config["bound"])
    norms2 = (f * f).sum(1)  # ‖f fᵀ‖_F = ‖f‖²
    f = f * np.sqrt(np.minimum(1.0, bound / np.maximum(norms2, 1e-300)))[:, None]
    return {"m2": second_moment_sum(f)}
