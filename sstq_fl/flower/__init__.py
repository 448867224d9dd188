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
:mod:`.discovery` (which node holds which partition, the QUERY handler), :mod:`.replies` (whose reply, why it
failed), :mod:`sstq_fl.config.flower` (the run config, the round timeout), :mod:`.simulation` (the in-process launcher, Ray
sizing), :mod:`.stopping` (one Ctrl-C stops it) and :mod:`.logs` (sstq-fl's lines and Flower's logger) are what the
project's own apps share.
"""

from .decoding import EmptyRound, LdpDecoding, WrongApi
from .legacy import LegacyLdpDecoding
from .mod import WIRE_STYPE, LdpEncodeMod, LdpSettings

__all__ = ["WIRE_STYPE", "EmptyRound", "LdpDecoding", "LdpEncodeMod", "LdpSettings", "LegacyLdpDecoding", "WrongApi"]
