"""Encode/aggregate speed (``sstq-fl bench encode-speed``), FWHT kernels and Kashin levels.

All timings are medians over repetitions after a warm-up, measured side by side in one
process; ``loop_encode_s_per_round`` encodes the same clients one at a time (batch of one)
with the same code, which is what a per-client simulation would do.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from .. import rng, wire
from ..encoders import Encoder, make_encoder
from ..encoders.maths.frames import make_frame
from ..encoders.maths.fwht import fwht_, is_available, kernels
from ..encoders.maths.kashin import KashinConfig
from ..encoders.maths.kashin_levels import achieved_level, adversarial_inputs
from ..io import atomic_write_json, run_meta
from .mse import E1_ENCODERS, with_bits
from .timing import timing_row


def timeit(fn: Callable[[], Any], reps: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def client_inputs(clients: int, dim: int, device: str, seed: int = 0) -> torch.Tensor:
    g = torch.from_numpy(rng.normal(np.arange(seed, seed + clients, dtype=np.uint64), "speed-input", dim))
    return (g / torch.linalg.vector_norm(g, dim=1, keepdim=True)).float().to(device)


def encode_speed(clients: int, dim: int, epsilon: float, bits: int, out: str, encoders: list[str] | None = None,
                 reps: int = 5, device: str = "cpu", inputs: list[str] | None = None, loop: bool = True,
                 secure: bool = True) -> dict[str, Any]:
    """Per encoder, both randomness modes side by side in one process: ``reproducible`` (seeds
    from the run seed) and ``secure`` (a fresh OS-CSPRNG key per client per round, ChaCha20 coins;
    drawing the keys is part of the timed encode; constant-time, the secure default), with
    ``secure_adaptive_encode_s_per_round`` the secure encode whose Kashin step stops at convergence;
    ``secure_over_reproducible`` and ``constant_time_over_adaptive`` are ratios.  With ``inputs``
    (kinds of :data:`~sstq_fl.bench.timing.INPUT_KINDS`), ``by_input`` adds the per-message median per
    input kind, adaptive and constant-time side by side (:func:`~sstq_fl.bench.timing.timing_row`).  Without
    ``loop`` the one-message-at-a-time encode is not timed, without ``secure`` the secure columns are left out
    (both grow with the cohort: a large cohort's batched times come first)."""
    x = client_inputs(clients, dim, device)
    seeds = np.arange(clients)
    rows: list[dict[str, Any]] = []
    by_input: list[dict[str, Any]] = []
    for label in encoders or ["clean", *E1_ENCODERS]:
        enc = make_encoder(with_bits(label, bits), dim, epsilon, radius=1.0, device=device)
        row = _speed_row(enc, label, x, seeds, reps, loop)
        rows.append(_secure_columns(row, enc, x, seeds, reps) if secure else row)
        if inputs:
            by_input.append(timing_row(enc, label, reps, tuple(inputs)))
    result = {"clients": clients, "dim": dim, "epsilon": epsilon, "bits": bits, "rows": rows, "meta": run_meta()}
    if inputs:
        result["by_input"] = by_input
    atomic_write_json(out, result)
    return result


def _secure_columns(row: dict[str, Any], enc: Encoder, x: torch.Tensor, seeds: np.ndarray, reps: int) -> dict[str, Any]:
    """``row`` with the secure encode's times: constant-time (the default) and adaptive, and their ratios."""
    row["secure_encode_s_per_round"] = timeit(partial(_secure_encode, enc, x, seeds, True), reps)
    row["secure_adaptive_encode_s_per_round"] = timeit(partial(_secure_encode, enc, x, seeds, False), reps)
    row["secure_over_reproducible"] = row["secure_encode_s_per_round"] / row["encode_s_per_round"]
    row["constant_time_over_adaptive"] = row["secure_encode_s_per_round"] / row["secure_adaptive_encode_s_per_round"]
    return row


def _secure_encode(enc: Encoder, x: torch.Tensor, seeds: np.ndarray, constant_time: bool) -> None:
    """One round's encode in secure mode, drawing the clients' fresh keys included."""
    enc.encode(x, rng.fresh_keys(x.shape[0]), coins=seeds, constant_time=constant_time)


def _speed_row(enc: Encoder, label: str, x: torch.Tensor, seeds: np.ndarray, reps: int,
               loop_too: bool = True) -> dict[str, Any]:
    clients = x.shape[0]
    msgs = enc.encode(x, seeds, coins=seeds)
    blobs = wire.pack(enc, msgs, round=0)

    def encode() -> None:
        enc.encode(x, seeds, coins=seeds)

    def aggregate() -> None:
        enc.aggregate(msgs, coins=seeds)

    def unpack() -> None:
        wire.unpack(enc, blobs, round=0)

    def loop() -> None:
        for i in range(clients):
            enc.encode(x[i : i + 1], seeds[i : i + 1], coins=seeds[i : i + 1])

    batched = timeit(encode, reps)
    row = {
        "encoder": label, "spec": enc.spec, "device": str(x.device), "clients": clients, "dim": x.shape[1],
        "encode_s_per_round": batched, "aggregate_s_per_round": timeit(aggregate, reps),
        "wire_decode_s_per_round": timeit(unpack, reps), "bits_per_message": enc.payload_bits(),
        "bytes_per_message": len(blobs[0]) - wire.HEADER_BYTES, "stats": msgs.stats,
    }
    if loop_too:
        row["loop_encode_s_per_round"] = looped = timeit(loop, max(1, reps // 2))
        row["loop_over_batched"] = looped / batched
    return _transform_columns(row, enc, x, reps)


def _transform_columns(row: dict[str, Any], enc: Encoder, x: torch.Tensor, reps: int) -> dict[str, Any]:
    """For an encoder over a frame: the time of one frame product ``√N Q x`` on the whole batch, the
    products an encode ran (``1 + 2 × kashin_passes_mean``: the start, then an analysis and a synthesis per
    pass) and their product, the encode's transform floor, with its share of the encode.  The rest of the
    encode is the Kashin steps' passes over ``[clients, N]`` rows, the quantizer and the channel."""
    frame = getattr(enc, "frame", None)
    if frame is None:
        return row
    buf = torch.empty(x.shape[0], frame.N, dtype=x.dtype, device=x.device)  # warm, as the encoder's workspaces are
    product = timeit(lambda: frame.coef(x, buf), reps)
    products = 1.0 + 2.0 * float(row["stats"].get("kashin_passes_mean", 0.0))
    row.update(frame_N=frame.N, frame_product_s=product, frame_products_per_encode=products,
               transform_floor_s_per_round=product * products,
               transform_share=product * products / row["encode_s_per_round"])
    return row


def fwht_speed(rows: int, sizes: list[int], out: str, reps: int = 10, device: str = "cpu") -> dict[str, Any]:
    res = []
    for n in sizes:
        x = torch.randn(rows, n, device=device)
        ref = None
        for name in kernels():
            if not is_available(name, torch.device(device)):
                continue
            t = _time_kernel(x, name, reps)
            y = fwht_(x.clone(), name)
            ref = y if ref is None else ref
            res.append({"kernel": name, "rows": rows, "N": n, "s": t, "device": device,
                        "max_abs_diff_vs_first": float((y - ref).abs().max())})
    result = {"rows": res, "meta": run_meta()}
    atomic_write_json(out, result)
    return result


def _time_kernel(x: torch.Tensor, name: str, reps: int) -> float:
    """Median time of one in-place transform; the input is restored (untimed) before each."""
    buf = x.clone()
    fwht_(buf, name)
    ts = []
    for _ in range(reps):
        buf.copy_(x)
        t = time.perf_counter()
        fwht_(buf, name)
        if buf.is_cuda:
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


KASHIN_SETTINGS = {
    "linf-default (level=1.9, 300 iters)": KashinConfig(),
    "linf (level=1.8, 300 iters)": KashinConfig(linf_level=1.8),
    "lv-fast (eta=0.6, delta=1.0)": KashinConfig(method="lv", eta=0.6, delta=1.0),
    "lv-default (eta=0.55, delta=0.9)": KashinConfig(method="lv"),
    "lv-spec (eta=0.5, delta=0.7)": KashinConfig(method="lv", eta=0.5, delta=0.7),
    "ap (level=1.75, 300 iters)": KashinConfig(method="ap", ap_level=1.75, ap_iters=300),
    "ap (level=1.65, 3000 iters)": KashinConfig(method="ap", ap_level=1.65, ap_iters=3000),
}


def kashin_levels(dim: int, out: str, rho: float = 2.5, n_each: int = 4, settings: list[str] | None = None) -> dict[str, Any]:
    """Achieved level (max over adversarial inputs) against each setting's public bound, and time."""
    frame = make_frame("hadamard", dim, rho, seed=0)
    inputs = {k: v.float() for k, v in adversarial_inputs(frame, n_each).items()}
    rows = []
    for name in settings or list(KASHIN_SETTINGS):
        cfg = KASHIN_SETTINGS[name]
        for kind, x in inputs.items():
            t = time.perf_counter()
            lvl = achieved_level(frame, x, cfg)
            rows.append({"setting": name, "input": kind, "achieved_level": float(lvl.max()),
                         "public_bound": cfg.level, "within_bound": bool((lvl <= cfg.level + 1e-5).all()),
                         "covers_natural_inputs": cfg.covers_natural_inputs,
                         "s_per_vector": (time.perf_counter() - t) / x.shape[0]})
    result = {"d": dim, "N": frame.N, "rho": rho, "units": "||x|| / sqrt(N)", "rows": rows, "meta": run_meta()}
    atomic_write_json(out, result)
    return result
