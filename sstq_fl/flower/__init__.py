"""sstq-fl's encoders in any Flower app: a client mod and a server strategy wrapper.

The one place in ``sstq_fl`` that imports Flower (the rest of the package runs without it):

```python
from sstq_fl.flower import LdpDecoding, LdpEncodeMod

app = ClientApp(mods=[arrays_size_mod, LdpEncodeMod("privunit", epsilon=3.0, radius=0.01)])  # client
strategy = LdpDecoding(FedAvg(fraction_evaluate=0.0), encoder="privunit", epsilon=3.0, radius=0.01)  # server
# a legacy flwr.server.strategy (LegacyContext + DefaultWorkflow, NumPyClient apps): LegacyLdpDecoding(FedAvg(...), ...)
```

:mod:`.client_ledger` is each client's own privacy ledger and budget (in the node's state);
:mod:`.cohort` makes a simulated node host a cohort of virtual clients (one message per client);
:mod:`.plumbing` holds what the project's own apps share (node discovery, round timeout,
error attribution, the QUERY handler, the in-process simulation launcher).
"""

from .decoding import EmptyRound, LdpDecoding, WrongApi
from .legacy import LegacyLdpDecoding
from .mod import WIRE_STYPE, LdpEncodeMod, LdpSettings

__all__ = ["WIRE_STYPE", "EmptyRound", "LdpDecoding", "LdpEncodeMod", "LdpSettings", "LegacyLdpDecoding", "WrongApi"]
