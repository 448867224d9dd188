"""Named stages of a round, timed in place when a recorder is active (``sstq-fl bench round-cost``).

The engines and encoders mark their stages with ``with stage("kashin"): ...``.  Outside
:func:`recording` a mark costs one context-variable lookup and times nothing.  Inside it, each
stage's *exclusive* time is added to the recorder: a stage nested in another (``kashin`` inside
``encode``) is taken out of its parent's time, so the stages of a round sum to the round.  On a
CUDA device the recorder synchronises at every stage boundary, so that asynchronous kernels are
charged to the stage that launched them.

The times are a local simulation measurement: a recorder is never active in a run, and nothing
it measures leaves the process it was taken in.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = ["StageTimes", "recording", "stage"]


@dataclass
class StageTimes:
    """Exclusive seconds and entry counts per stage name, in the order the stages were first entered."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    sync: bool = False
    _stack: list[list[float]] = field(default_factory=list, repr=False)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    def total(self) -> float:
        return sum(self.seconds.values())


_ACTIVE: ContextVar[StageTimes | None] = ContextVar("sstq_fl_stage_times", default=None)


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Charge the block's time, less that of the stages nested in it, to ``name`` (nothing when no
    recorder is active)."""
    rec = _ACTIVE.get()
    if rec is None:
        yield
        return
    if rec.sync:
        _synchronize()
    frame = [time.perf_counter(), 0.0]  # start, seconds of nested stages
    rec._stack.append(frame)
    try:
        yield
    finally:
        if rec.sync:
            _synchronize()
        took = time.perf_counter() - frame[0]
        rec._stack.pop()
        if rec._stack:
            rec._stack[-1][1] += took
        rec.add(name, took - frame[1])


@contextmanager
def recording(sync: bool = True) -> Iterator[StageTimes]:
    """Record the stages entered in the block (``sync``: synchronise CUDA at each boundary)."""
    rec = StageTimes(sync=sync)
    token = _ACTIVE.set(rec)
    try:
        yield rec
    finally:
        _ACTIVE.reset(token)
