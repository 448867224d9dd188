"""sstq-fl: private, communication-efficient federated learning simulation."""

import os as _os

# OpenMP threads that spin while waiting make PyTorch 10-25x slower whenever another process
# (a Ray actor, a second run) shares the cores; passive waiting costs nothing when alone.
# Takes effect only if torch is imported after sstq_fl (the CLI and the tests do so).
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
