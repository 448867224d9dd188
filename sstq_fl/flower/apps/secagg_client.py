"""The client side of ``trust=secagg`` on Flower: one node's share of the secure sum, through Flower's SecAgg+.

Flower's :func:`~flwr.client.mod.secaggplus_mod` runs the protocol (keys, Shamir shares of the mask seeds, masking,
unmasking); the handler below is what it wraps in the stage that collects masked vectors: the node's client computes
its share ``y ∈ Z_m`` (:meth:`sstq_fl.fl.clients.ClientData.shares`: clip, rotate, round, add its own discrete noise,
reduce mod ``m``) and hands it to the mod as ``y − m/2``, which SecAgg+'s quantizer maps back onto ``y`` exactly
(:func:`secaggplus_ranges`).  The node's train handler routes a message that carries SecAgg+'s configuration here
(:func:`route_train`) and every other train message through the LDP encoder, so one ClientApp serves both.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Context, Message

if TYPE_CHECKING:
    from sstq_fl.config.train import RunConfig
    from sstq_fl.fl.secure_aggregation import SecureAggregation

SECAGG_CONFIGS = "secaggplus_configs"  # the config record SecAgg+'s messages carry (Flower's RECORD_KEY_CONFIGS)
FLOWER_MODULUS_LIMIT = 2**32  # SecAgg+'s masks live in Z_M with M at most this


def secaggplus_ranges(bits: int, clients: int) -> dict[str, Any]:
    """SecAgg+'s quantization settings under which a share ``y ∈ [0, m)`` sent as ``y − m/2`` is summed exactly:
    clipping range ``m/2`` and quantization range ``m`` (its quantizer is then ``x ↦ x + m/2``, exact on integers),
    weight 1 (``max_weight = 1``), and the mask modulus ``M``: the least power of two above ``m · (clients + 1)``, so
    that the sum of the clients' weights, ``clients · m``, survives modulo ``M`` and ``M`` is a multiple of ``m``."""
    m = 2**bits
    big = 1 << (m * (clients + 1)).bit_length()
    if big > FLOWER_MODULUS_LIMIT:
        raise ValueError(f"trust=secagg on Flower: {clients} clients at {bits} bits need a mask modulus of {big}, over "
                         f"SecAgg+'s 2^32 (use fewer --secagg-bits)")
    return {"clipping_range": m / 2, "quantization_range": m, "modulus_range": big, "max_weight": 1.0}


def secaggplus_graph(clients: int) -> tuple[int, int]:
    """SecAgg+'s ``(num_shares, reconstruction_threshold)`` for ``clients`` nodes: each node shares its secrets with
    ``k = 2⌈log₂ n⌉ + 1`` neighbours (all nodes when fewer; Bell et al., CCS 2020, Sec. 3: a random graph of
    logarithmic degree), and any ``⌊k/2⌋ + 1`` of them reconstruct (a majority, so a server that claims a node dropped
    cannot also collect its mask seed's shares from the rest).  Per-node cost then grows with ``log n``, not ``n``."""
    k = min(clients, max(3, 2 * math.ceil(math.log2(max(clients, 2))) + 1))
    return k, k // 2 + 1


def recovered_sum(vector: np.ndarray, clients: int, bits: int) -> np.ndarray:
    """The modular sum ``Σ y mod m`` of ``clients`` shares from what SecAgg+ hands the strategy,
    ``((Σ y mod M) − clients·m/2) / clients`` (its dequantized, de-offset, weight-normalised vector)."""
    m = 2**bits
    total = np.rint(np.asarray(vector, dtype=np.float64) * clients + clients * m / 2).astype(np.int64)
    return np.mod(total, m)


@lru_cache(maxsize=2)
def _stage(cfg_json: str, dim: int) -> SecureAggregation:
    """The calibrated stage (codec and its accounting), once per actor process and config."""
    from sstq_fl.config.train import RunConfig
    from sstq_fl.fl.secure_aggregation import SecureAggregation

    return SecureAggregation(RunConfig(**json.loads(cfg_json)), dim, "client")


def share_train(msg: Message, context: Context) -> Message:
    """The masked-vector stage's inner handler: this node's client's share as SecAgg+'s FitRes (weight 1)."""
    import flwr.compat.common.recorddict_compat as compat
    import torch
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

    from .shards import client_data

    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    cfg = _config(fitins.config, context)
    cfg_json = json.dumps(asdict(cfg), sort_keys=True)
    theta = torch.from_numpy(np.array(parameters_to_ndarrays(fitins.parameters)[0]))
    t, pid = int(fitins.config["server-round"]), int(context.node_config["partition-id"])
    sa = _stage(cfg_json, int(theta.numel()))
    share = client_data(cfg_json).shares(sa, theta, t, np.array([pid]))[0]
    sent = share.astype(np.float64) - sa.codec.modulus / 2
    fitres = FitRes(Status(Code.OK, "share"), ndarrays_to_parameters([sent]), num_examples=1, metrics={})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)


def _config(conf: Any, context: Context) -> RunConfig:
    """The run config the fit instructions carry (in-process launcher), else the node's ``context.run_config``."""
    from sstq_fl.config.flower import config_from_run_config
    from sstq_fl.config.train import RunConfig
    from sstq_fl.gen.pipelines import prefixes

    if "run-config" in conf:
        return RunConfig(**json.loads(str(conf["run-config"])))
    return config_from_run_config(dict(context.run_config), prefixes())[0]


def route_train(msg: Message, context: Context, call_next: Any) -> Message:
    """A train message of SecAgg+ (it carries :data:`SECAGG_CONFIGS`) goes through Flower's ``secaggplus_mod``
    around :func:`share_train`; any other goes on (the LDP encoder and the plain train handler)."""
    if SECAGG_CONFIGS not in msg.content.config_records:
        return call_next(msg, context)
    from flwr.client.mod import secaggplus_mod

    return secaggplus_mod(msg, context, share_train)
