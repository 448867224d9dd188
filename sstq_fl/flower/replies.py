"""Whose reply is it and why did it fail: attributing a reply, or an error the SuperLink returns on a node's
behalf, to its node, and one line saying why a reply carries a Flower error."""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Message
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode

_ERROR_KIND = {ErrorCode.NODE_UNAVAILABLE: "node unavailable (missed its heartbeats)",
               ErrorCode.MESSAGE_UNAVAILABLE: "message unavailable (expired before the node pulled it)",
               ErrorCode.REPLY_MESSAGE_UNAVAILABLE: "reply unavailable (expired before the server pulled it)",
               ErrorCode.MOD_FAILED_PRECONDITION: "client mod refused (code 6)",
               ErrorCode.LOAD_CLIENT_APP_EXCEPTION: "the node could not load the ClientApp (code 1)",
               ErrorCode.CLIENT_APP_CRASHED: "ClientApp process crashed (code 8)"}

REASON_CHARS = 2000  # a reason's first line is kept whole up to this (a mod's refusal names two encoder configurations)


def error_reason(r: Message) -> str:
    """Why a reply carries a Flower error, in one line: the kind (the client raised, a mod refused, its
    node went away, a message expired, ...) and the first line of the reason (up to :data:`REASON_CHARS`)."""
    first = (str(r.error.reason).splitlines() or ["no reason given"])[0][:REASON_CHARS] or "no reason given"
    code = int(r.error.code)
    return f"{_ERROR_KIND.get(code, f'client raised (code {code})')}: {first}"


def node_unavailable(r: Message) -> bool:
    """The reply is the SuperLink's note that the node missed its heartbeats."""
    return r.has_error() and int(r.error.code) == ErrorCode.NODE_UNAVAILABLE


def sender(r: Message, sent: Iterable[Message]) -> int:
    """The node a reply answers for: its source, or, for an error the SuperLink returns on a node's
    behalf (node unavailable, message expired), the node the message it answers went to (-1 if
    none of ``sent``)."""
    src = int(r.metadata.src_node_id)
    if r.has_error() and src == SUPERLINK_NODE_ID:
        to = {m.metadata.message_id: int(m.metadata.dst_node_id) for m in sent}
        return to.get(r.metadata.reply_to_message_id, -1)
    return src
