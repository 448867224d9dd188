"""Encode time per input kind (``sstq-fl bench encode-speed --inputs``): does it depend on the input?

A server that times a client's reply learns about the input beyond ε whenever the encode time
depends on it (Kocher, "Timing attacks on implementations of Diffie-Hellman, RSA, DSS, and other
systems", CRYPTO 1996, for the principle).  The Kashin step is the place where it does: its
iterations stop at convergence, and inputs differ by two orders of magnitude in how long that takes
(the zero input: no iteration; Gaussian inputs: 2 transform pairs; frame rows: about 33; Walsh-flat
inputs, whose level exceeds the public one: the whole cap).  Here one message is encoded at a time,
the input kinds interleaved round-robin (so a load change on the machine hits every kind alike),
each with a fresh secure key, and the median per kind is reported, for the adaptive encode and the
constant-time one side by side.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import numpy as np
import torch

from .. import rng
from ..encoders import Encoder
from ..encoders.maths.frames import HadamardFrame, make_frame
from .kashin import flat_vector, walsh_flats

INPUT_KINDS = ("zero", "gaussian", "walsh-flat", "frame-row")
"""The input kinds timed: what a non-finite update becomes, a typical gradient, an adversarial input
that never reaches the public level, and the natural input that needs the most iterations."""


def timing_inputs(enc: Encoder, kinds: tuple[str, ...] = INPUT_KINDS) -> dict[str, torch.Tensor]:
    """One ``[1, d]`` input of each kind, of norm ``R`` (the zero input excepted), built on the encoder's
    own frame where it has one (so the hard inputs are hard for it), else on the public Hadamard frame."""
    own = getattr(enc, "frame", None)
    frame = own if isinstance(own, HadamardFrame) else make_frame("hadamard", max(enc.dim, 2), seed=0)
    assert isinstance(frame, HadamardFrame)
    return {kind: _input(kind, frame)[:, : enc.dim] * enc.radius for kind in kinds}


def _input(kind: str, frame: HadamardFrame) -> torch.Tensor:
    if kind == "zero":
        return torch.zeros(1, frame.d, dtype=torch.float64)
    if kind == "gaussian":
        g = torch.from_numpy(rng.normal(np.array([0], dtype=np.uint64), "timing-gauss", frame.d))
        return g / torch.linalg.vector_norm(g)
    if kind == "frame-row":
        return frame.rows(torch.tensor([1])) * math.sqrt(frame.N / frame.d)
    if kind == "walsh-flat":
        flats = walsh_flats(frame, restarts=2, greedy_dim=max(1, int(math.log2(frame.N)) - 13))
        return flat_vector(frame, flats[0])
    raise ValueError(f"unknown input kind {kind!r}; choose from {list(INPUT_KINDS)}")


CLOCKS = ("wall", "cpu")
"""``wall``: what a server timing the reply sees; ``cpu``: this thread's CPU time, the part of it the
encoder's own work makes (other processes' preemption excluded: the robust measure on a loaded machine,
with one torch thread so that all the work runs in the calling thread)."""


def time_one(enc: Encoder, x: torch.Tensor, constant_time: bool | None) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one encode of ``x`` with a fresh secure key (``constant_time=None``: the
    encoder's default for secure keys)."""
    keys = rng.fresh_keys(1)
    wall, cpu = time.perf_counter(), time.thread_time()
    enc.encode(x, keys, coins=np.arange(1), constant_time=constant_time)
    if enc.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - wall, time.thread_time() - cpu


def rotated(kinds: list[str], rep: int) -> list[str]:
    """``kinds`` rotated by ``rep``: over repetitions each kind comes first (and at every place) as often."""
    k = rep % len(kinds)
    return kinds[k:] + kinds[:k]


def per_message_times(enc: Encoder, inputs: dict[str, torch.Tensor], reps: int, constant_time: bool | None,
                      warmup: int = 2, clock: str = "wall") -> dict[str, list[float]]:
    """Seconds per single-message encode on ``clock`` (:data:`CLOCKS`), ``reps`` per kind, kinds interleaved and
    their order rotated each repetition (the first encode of a cycle runs slower, by about 10 % at d = 25,450: a
    fixed order would charge that to one kind)."""
    times: dict[str, list[float]] = {k: [] for k in inputs}
    kinds = list(inputs)
    for rep in range(warmup + reps):
        for kind in rotated(kinds, rep):
            t = time_one(enc, inputs[kind], constant_time)[CLOCKS.index(clock)]
            if rep >= warmup:
                times[kind].append(t)
    return times


def spread(medians: dict[str, float]) -> float:
    """``max/min − 1`` of the per-kind medians (0: the same median for every kind)."""
    return max(medians.values()) / min(medians.values()) - 1.0


MODES = ("adaptive", "constant_time")


def timing_row(enc: Encoder, label: str, reps: int, kinds: tuple[str, ...] = INPUT_KINDS) -> dict[str, Any]:
    """Per kind and clock the median seconds per message of the adaptive and of the constant-time encode
    (:func:`measure`), their spreads and the cost ratio."""
    got = measure(enc, timing_inputs(enc, kinds), reps)
    row: dict[str, Any] = {"encoder": label, "spec": enc.spec, "dim": enc.dim, "reps": reps, "torch_threads": 1}
    for (mode, c), ts in got.items():
        row[f"{mode}_{c}_s_per_message"] = med = {k: statistics.median(v) for k, v in ts.items()}
        row[f"{mode}_{c}_spread"] = spread(med)
    row["constant_time_over_adaptive_cpu"] = {k: row["constant_time_cpu_s_per_message"][k] / v
                                              for k, v in row["adaptive_cpu_s_per_message"].items()}
    return row


def measure(enc: Encoder, inputs: dict[str, torch.Tensor], reps: int) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Seconds per message by ``(mode, clock)`` and kind, on one torch thread, after one warm-up of each;
    the modes alternate rep by rep and the kinds are interleaved, their order rotated each rep (the first encode
    after a mode switch runs slower: a fixed order would charge that to one kind), so all see the same machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for ct in (False, True):
            per_message_times(enc, inputs, 0, ct, warmup=1)
        got: dict[tuple[str, str], dict[str, list[float]]] = {(m, c): {k: [] for k in inputs} for m in MODES for c in CLOCKS}
        kinds = list(inputs)
        for rep in range(reps):
            for mode in MODES:
                for kind in rotated(kinds, rep):
                    for c, v in zip(CLOCKS, time_one(enc, inputs[kind], mode == "constant_time"), strict=True):
                        got[mode, c][kind].append(v)
        return got
    finally:
        torch.set_num_threads(threads)
