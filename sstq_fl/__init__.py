"""sstq-fl: private, communication-efficient federated learning simulation."""

import os as _os
import typing as _typing

# OpenMP threads that spin while waiting make PyTorch 10-25x slower whenever another process
# (a Ray actor, a second run) shares the cores; passive waiting costs nothing when alone.
# Takes effect only if torch is imported after sstq_fl (the CLI and the tests do so).
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

if _typing.TYPE_CHECKING:
    from .fl.user_task import Task

__all__ = ["Task", "__version__"]


def __getattr__(name: str) -> _typing.Any:
    """``sstq_fl.Task`` on first use: importing ``sstq_fl`` stays cheap and leaves torch unimported
    (it must come after the OpenMP setting above)."""
    if name == "Task":
        from .fl.user_task import Task

        return Task
    raise AttributeError(f"module 'sstq_fl' has no attribute {name!r}")
