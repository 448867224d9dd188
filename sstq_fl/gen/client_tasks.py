"""Client tasks every pipeline may use beside DP-SGD's (:mod:`sstq_fl.gen.dpsgd`): an additive labelled
statistic and a record-local label release.

Each task is ``fn(ctx, payload, config) -> arrays``: it sees only its own records, the broadcast payload
(numpy arrays) and scalars, and returns numpy arrays.  Per-record contributions are bounded **on the
client** (clipping), so the server's noise scale holds whatever a client computes.
"""

from __future__ import annotations

import numpy as np

from ..privacy.clipping import clip_rows
from .releases import AGGREGATOR_RELEASE, label_rr_event, ldp_release
from .runner import Arrays, ClientContext, Scalar, register_client_task


# ----------------------------------------------------------------------------- additive statistics
@register_client_task("stats.class_sums", AGGREGATOR_RELEASE)
def class_pixel_sums(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """Labelled counts and per-class sums of ``clip_R(x_i)`` (pixels), ``R = √(bound² − 1)``:
    each record contributes ``(e_y, clip_R(x)⊗e_y)`` of norm ≤ ``bound``."""
    r = float(np.sqrt(float(config["bound"]) ** 2 - 1.0))
    x = ctx.x.reshape(len(ctx.x), -1).astype(np.float64)
    x = clip_rows(x, r)
    counts = np.bincount(ctx.y, minlength=10).astype(np.float64)
    sums = np.zeros((10, x.shape[1]))
    np.add.at(sums, ctx.y, x)
    return {"counts": counts, "sums": sums}


# ----------------------------------------------------------------------------- record-local releases
@register_client_task("labels.randomized_response", ldp_release(label_rr_event))
def label_randomized_response(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """k-ary randomized response on each own record's label (Warner, JASA 1965): keep ``y`` with
    probability ``e^ε/(e^ε+k−1)``, else report one of the other ``k−1`` labels uniformly, so
    every output has probability ratio ≤ ``e^ε`` between any two inputs.  The coins are the client's
    protective draws (:meth:`ClientContext.uniform`, :meth:`ClientContext.randint`)."""
    eps, k = float(config["epsilon"]), int(config.get("classes", 10))
    keep = ctx.uniform("label-rr", len(ctx.y)) < np.exp(eps) / (np.exp(eps) + k - 1)
    shift = ctx.randint("label-rr", len(ctx.y), 1, k)
    return {"labels": np.where(keep, ctx.y, (ctx.y + shift) % k).astype(np.int64)}
