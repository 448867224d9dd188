"""The legacy Flower API: each wrapper refuses the other API's strategy naming the one to use, and the mod
sends a NumPyClient's fit reply as one LDP message without its metrics."""

import numpy as np
import pytest
from flwr.app import Context, Message, MessageType, RecordDict
from flwr.common import Code, FitIns, FitRes, Status, ndarrays_to_parameters
from flwr.compat.common.recorddict_compat import fitins_to_recorddict, fitres_to_recorddict, recorddict_to_fitres
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.serverapp.strategy import FedAvg

from sstq_fl.flower import WIRE_STYPE, LdpDecoding, LdpEncodeMod, LegacyLdpDecoding, WrongApi

LDP = {"encoder": "privunit", "epsilon": 3.0, "radius": 0.01}


def test_each_wrapper_refuses_the_other_apis_strategy_naming_the_one_to_use():
    with pytest.raises(WrongApi, match=r"use sstq_fl\.flower\.LegacyLdpDecoding: got flwr\.server\.strategy\.fedavg\.FedAvg$"):
        LdpDecoding(LegacyFedAvg(), **LDP)
    with pytest.raises(WrongApi, match=r"LdpDecoding and strategy\.start\(grid, \.\.\.\): got flwr\.serverapp"):
        LegacyLdpDecoding(FedAvg(), **LDP)
    with pytest.raises(WrongApi, match=r"^LdpDecoding wraps a Message-API strategy .* use sstq_fl\.flower\.LegacyLdpDecoding"):
        LdpDecoding(FedAvg(), **LDP).initialize_parameters(None)  # where DefaultWorkflow starts a strategy


def _fit(weights: list[np.ndarray], config: dict) -> Message:
    return Message(fitins_to_recorddict(FitIns(ndarrays_to_parameters(weights), config), True), dst_node_id=1,
                   message_type=MessageType.TRAIN)


def _numpy_client(step: float):
    def handler(msg: Message, context: Context) -> Message:
        ins = msg.content.array_records["fitins.parameters"]
        new = [a.numpy() - step for a in ins.values()]
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(new), 123, {"train_loss": 0.5})
        return Message(fitres_to_recorddict(res, False), reply_to=msg)
    return handler


def test_the_mod_sends_a_numpy_clients_fit_reply_as_one_ldp_message_without_its_metrics(run_identity):
    weights = [np.zeros((3, 2), np.float32), np.zeros(4, np.float32)]
    st = LegacyLdpDecoding(LegacyFedAvg(), **LDP)
    st.prepare(weights)
    enc = st.enc.for_round(1)
    msg = _fit(weights, {"server-round": 1, "ldp-fingerprint": enc.fingerprint})
    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 0}, state=RecordDict(), run_config={})
    reply = LdpEncodeMod(**LDP)(msg, ctx, _numpy_client(0.001))
    res = recorddict_to_fitres(reply.content, False)
    assert res.parameters.tensor_type == WIRE_STYPE and len(res.parameters.tensors) == 1
    assert res.metrics == {} and res.num_examples == 1  # the client's loss and count stay home


def test_an_unwrapped_legacy_server_gets_no_model_and_stops_naming_the_wrapper(run_identity):
    from flwr.common import parameters_to_ndarrays

    msg = _fit([np.zeros(4, np.float32)], {})
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    reply = LdpEncodeMod(**LDP)(msg, ctx, lambda m, c: pytest.fail("no training for an unwrapped server"))
    res = recorddict_to_fitres(reply.content, False)
    with pytest.raises(ValueError, match=r"wrap the server's legacy strategy in sstq_fl\.flower\.LegacyLdpDecoding"):
        parameters_to_ndarrays(res.parameters)
