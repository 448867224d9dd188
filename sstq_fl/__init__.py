"""sstq-fl: private, communication-efficient federated learning simulation.

Importing the package changes nothing outside it: the process-wide settings (OpenMP's wait policy, the C
allocator's thresholds) are applied by an entry point (:mod:`sstq_fl.process`).
"""

import typing as _typing

__version__ = "0.1.0"

if _typing.TYPE_CHECKING:
    from .fl.user_task import Task

__all__ = ["Task", "__version__"]


def __getattr__(name: str) -> _typing.Any:
    """``sstq_fl.Task`` on first use: importing ``sstq_fl`` stays cheap and leaves torch unimported (an entry
    point applies :mod:`sstq_fl.process`'s settings before torch loads)."""
    if name == "Task":
        from .fl.user_task import Task

        return Task
    raise AttributeError(f"module 'sstq_fl' has no attribute {name!r}")
