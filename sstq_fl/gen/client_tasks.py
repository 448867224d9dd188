"""Client tasks every pipeline may use beside DP-SGD's (:mod:`sstq_fl.gen.dpsgd`): an additive labelled
statistic, a record-local label release, and the share of a secure sum that carries any additive task's sums
(``--trust secagg``).

Each task is ``fn(ctx, payload, config) -> arrays``: it sees only its own records, the broadcast payload
(numpy arrays) and scalars, and returns numpy arrays.  Per-record contributions are bounded **on the
client** (clipping), so the server's noise scale holds whatever a client computes.
"""

from __future__ import annotations

import json

import numpy as np

from ..privacy.clipping import clip_rows
from ..secagg.records import RecordSecAgg, flatten
from .releases import (
    AGGREGATOR,
    AGGREGATOR_RELEASE,
    SECAGG,
    SECAGG_ROUND_SEED,
    SECAGG_SHAPES,
    SECAGG_TASK,
    SECURE_RELEASE,
    SHARE_TASK,
    label_rr_event,
    ldp_release,
)
from .runner import Arrays, ClientContext, Scalar, register_client_task, registered_task


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


# ----------------------------------------------------------------------------- secure aggregation
@register_client_task(SHARE_TASK, SECURE_RELEASE)
def secagg_share(ctx: ClientContext, payload: Arrays, config: dict[str, Scalar]) -> Arrays:
    """This client's share of a secure sum (``--trust secagg``): run the additive task the request names
    (``secagg-task``, a sum for an aggregator, clipped on the client as always) on its own records, check its
    arrays against the public shapes, flatten them and encode them under the request's release
    (:meth:`~sstq_fl.secagg.records.RecordSecAgg.encode`): error-conditioned rounding and this client's own
    discrete Gaussian noise share, from its own coins (:meth:`ClientContext.coins`), mod ``2^bits``.  Only
    ``{"share": int64 [p]}`` leaves the client; its raw sums never do."""
    inner_name = str(config[SECAGG_TASK])
    inner = registered_task(inner_name)
    if inner.release.kind != AGGREGATOR:
        raise ValueError(f"secure aggregation carries the sums of an additive task; {inner_name} releases "
                         f"{inner.release.kind}")
    release = RecordSecAgg.from_json(json.loads(str(config[SECAGG])))
    shapes = json.loads(str(config[SECAGG_SHAPES]))
    x = flatten(inner.run(ctx, payload, config), shapes)
    return {"share": release.encode(x, int(config[SECAGG_ROUND_SEED]), ctx.coins(f"secagg:{inner_name}"))}
