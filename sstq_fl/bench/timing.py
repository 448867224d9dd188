"""Encode time per input kind (``sstq-fl bench encode-speed --inputs``): does it depend on the input?

A server that times a client's reply learns about the input beyond ε whenever the encode time
depends on it (Kocher, "Timing attacks on implementations of Diffie-Hellman, RSA, DSS, and other
systems", CRYPTO 1996, for the principle).  The Kashin step is the place where it does: its
iterations stop at convergence, and inputs differ by two orders of magnitude in how long that takes
(the zero input: no iteration; Gaussian inputs: 3 transform pairs; frame rows: about 35; Walsh-flat
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


def per_message_times(enc: Encoder, inputs: dict[str, torch.Tensor], reps: int, constant_time: bool | None,
                      warmup: int = 2) -> dict[str, list[float]]:
    """Seconds per single-message encode, ``reps`` per kind, kinds interleaved; each with a fresh secure key
    (``constant_time=None``: the encoder's default for secure keys)."""
    times: dict[str, list[float]] = {k: [] for k in inputs}
    for rep in range(warmup + reps):
        for kind, x in inputs.items():
            keys = rng.fresh_keys(1)
            t = time.perf_counter()
            enc.encode(x, keys, coins=np.arange(1), constant_time=constant_time)
            if x.is_cuda or enc.device.type == "cuda":
                torch.cuda.synchronize()
            if rep >= warmup:
                times[kind].append(time.perf_counter() - t)
    return times


def spread(medians: dict[str, float]) -> float:
    """``max/min − 1`` of the per-kind medians (0: the same median for every kind)."""
    return max(medians.values()) / min(medians.values()) - 1.0


def timing_row(enc: Encoder, label: str, reps: int, kinds: tuple[str, ...] = INPUT_KINDS) -> dict[str, Any]:
    """Per kind the median seconds per message of the adaptive and of the constant-time encode, measured
    in one interleaved loop (so both see the same machine), their spreads and the cost ratio."""
    inputs = timing_inputs(enc, kinds)
    for mode in (False, True):
        per_message_times(enc, inputs, 0, mode, warmup=1)
    adaptive: dict[str, list[float]] = {k: [] for k in inputs}
    fixed: dict[str, list[float]] = {k: [] for k in inputs}
    for _ in range(reps):  # alternate the two modes rep by rep
        for mode, acc in ((False, adaptive), (True, fixed)):
            for kind, ts in per_message_times(enc, inputs, 1, mode, warmup=0).items():
                acc[kind].append(ts[0])
    med_a = {k: statistics.median(v) for k, v in adaptive.items()}
    med_f = {k: statistics.median(v) for k, v in fixed.items()}
    return {"encoder": label, "spec": enc.spec, "dim": enc.dim, "reps": reps,
            "adaptive_s_per_message": med_a, "constant_time_s_per_message": med_f,
            "adaptive_spread": spread(med_a), "constant_time_spread": spread(med_f),
            "constant_time_over_adaptive": {k: med_f[k] / med_a[k] for k in inputs}}
