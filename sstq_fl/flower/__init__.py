"""sstq-fl's encoders in any Flower app: a client mod and a server strategy wrapper.

The one place in ``sstq_fl`` that imports Flower (tests/test_backends.py checks it)::

    from sstq_fl.flower import LdpDecoding, LdpEncodeMod

    app = ClientApp(mods=[LdpEncodeMod("sstq-flat:b=4", epsilon=3.0, radius=1.0)])          # client
    strategy = LdpDecoding(FedAvg(), encoder="sstq-flat:b=4", epsilon=3.0, radius=1.0)     # server

:mod:`.cohort` makes a simulated node host a cohort of virtual clients (one message per client);
:mod:`.plumbing` holds what the project's own apps share (node discovery, round timeout,
error attribution, the QUERY handler, the in-process simulation launcher).
"""

from .decoding import LdpDecoding
from .mod import WIRE_STYPE, LdpEncodeMod, LdpSettings

__all__ = ["WIRE_STYPE", "LdpDecoding", "LdpEncodeMod", "LdpSettings"]
