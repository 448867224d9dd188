"""The legacy message format that :class:`sstq_fl.flower.LdpEncodeMod` meets under a ``NumPyClient`` app.

Flower runs a ``ClientApp(client_fn=...)`` (``NumPyClient``, ``Client``) and a legacy strategy
(``flwr.server.strategy``, driven by ``DefaultWorkflow``) over messages whose RecordDict holds the
legacy types under fixed names (Flower 1.42 ``flwr.compat.common.recorddict_compat``): a ``train``
message carries ``fitins.parameters`` (an ArrayRecord with keys ``"0"``, ``"1"``, ... of serialized
NumPy arrays) and ``fitins.config``; the reply carries ``fitres.parameters``, ``fitres.num_examples``
(a MetricRecord), ``fitres.metrics`` (a **ConfigRecord**) and ``fitres.status``
(https://flower.ai/docs/framework/ref-api/flwr.common.html, "recorddict_compat").

The mod encodes ``fitres.parameters`` like a Message-API reply's arrays.  What differs is here: the
reply's metrics (``fitres.metrics``, ``fitres.num_examples``), and the refusal a client sends a legacy
server without :class:`sstq_fl.flower.LegacyLdpDecoding`.
"""

from __future__ import annotations

import io

from flwr.app import ConfigRecord, Message, MetricRecord
from flwr.compat.common.recorddict_compat import fitres_to_recorddict
from flwr.compat.common.typing import Code, FitRes, Parameters, Status
from numpy.lib import format as npy

FIT_INS = "fitins.parameters"
FIT_METRICS = "fitres.metrics"
FIT_NUM_EXAMPLES = "fitres.num_examples"
UNWRAPPED = "sstq-fl.wire/1: no model sent; wrap the server's legacy strategy in sstq_fl.flower.LegacyLdpDecoding"


def is_fit(msg: Message) -> bool:
    """A legacy ``fit`` message (a NumPyClient app's train message from a legacy strategy)."""
    return FIT_INS in msg.content.array_records


def refusal_tensor() -> bytes:
    """A serialized-array header whose dtype names the missing wrapper: Flower's ``bytes_to_ndarray``
    (``np.load``) fails on it with ``descr is not a valid dtype descriptor: '<UNWRAPPED>'``."""
    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": UNWRAPPED, "fortran_order": False, "shape": (0,)})
    return out.getvalue()


def refusal(msg: Message) -> Message:
    """The reply to a legacy server that does not decode LDP messages: no training, no model, no metrics;
    one tensor that stops the server's strategy where it deserializes it, naming the wrapper.  An error
    reply would be counted as a failure that Flower's legacy FedAvg accepts, and the run would go on."""
    params = Parameters(tensors=[refusal_tensor()], tensor_type=UNWRAPPED)
    res = FitRes(Status(Code.OK, "LdpEncodeMod: " + UNWRAPPED), params, num_examples=1, metrics={})
    return Message(fitres_to_recorddict(res, keep_input=False), reply_to=msg)


def reduce_metrics(reply: Message, metrics: str) -> None:
    """``metrics`` (:class:`sstq_fl.flower.LdpEncodeMod`'s choice) for a legacy reply: ``"none"`` sends
    ``num_examples = 1`` (a constant: the legacy reply must hold one) and no metric, ``"num-examples"``
    the count and no metric, ``"keep"`` both."""
    recs = reply.content
    if metrics != "keep" and FIT_METRICS in recs.config_records:
        recs.config_records[FIT_METRICS] = ConfigRecord({})
    if metrics == "none" and FIT_NUM_EXAMPLES in recs.metric_records:
        recs.metric_records[FIT_NUM_EXAMPLES] = MetricRecord({"num_examples": 1})

