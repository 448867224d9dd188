"""Encode/aggregate speed (``sstq-fl bench encode-speed``), FWHT kernels and Kashin levels.

All timings are medians over repetitions after a warm-up, measured side by side in one
process; ``loop_encode_s_per_round`` encodes the same clients one at a time (batch of one)
with the same code, which is what a per-client simulation would do.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .. import rng, wire
from ..encoders import make_encoder
from ..fwht import fwht_, is_available, kernels
from ..frames import make_frame
from ..io import atomic_write_json, run_meta
from ..kashin import KashinConfig, achieved_level, adversarial_inputs
from .mse import E1_ENCODERS, with_bits


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
                 reps: int = 5, device: str = "cpu") -> dict[str, Any]:
    x = client_inputs(clients, dim, device)
    seeds = np.arange(clients)
    rows = []
    for label in encoders or ["clean", *E1_ENCODERS]:
        enc = make_encoder(with_bits(label, bits), dim, epsilon, radius=1.0, device=device)
        msgs = enc.encode(x, seeds, coins=seeds)
        blobs = wire.pack(enc, msgs, round=0)

        def aggregate(enc: Any = enc, msgs: Any = msgs) -> torch.Tensor:
            return enc.aggregate(msgs, coins=seeds)

        def loop(enc: Any = enc) -> None:
            for i in range(clients):
                enc.encode(x[i : i + 1], seeds[i : i + 1], coins=seeds[i : i + 1])

        rows.append({
            "encoder": label, "spec": enc.spec, "device": str(device), "clients": clients, "dim": dim,
            "encode_s_per_round": timeit(lambda enc=enc: enc.encode(x, seeds, coins=seeds), reps),
            "aggregate_s_per_round": timeit(aggregate, reps),
            "wire_decode_s_per_round": timeit(lambda enc=enc, blobs=blobs: wire.unpack(enc, blobs, round=0), reps),
            "loop_encode_s_per_round": timeit(loop, max(1, reps // 2)),
            "bits_per_message": enc.payload_bits(),
            "bytes_per_message": len(blobs[0]) - wire.HEADER_BYTES,
        })
        r = rows[-1]
        r["loop_over_batched"] = r["loop_encode_s_per_round"] / r["encode_s_per_round"]
    result = {"clients": clients, "dim": dim, "epsilon": epsilon, "bits": bits, "rows": rows, "meta": run_meta()}
    atomic_write_json(out, result)
    return result


def fwht_speed(rows: int, sizes: list[int], out: str, reps: int = 10, device: str = "cpu") -> dict[str, Any]:
    res = []
    for n in sizes:
        x = torch.randn(rows, n, device=device)
        ref = None
        for name in kernels():
            if not is_available(name, torch.device(device)):
                continue
            buf = x.clone()
            t = timeit(lambda buf=buf, name=name: fwht_(buf, name), reps)
            y = fwht_(x.clone(), name)
            ref = y if ref is None else ref
            res.append({"kernel": name, "rows": rows, "N": n, "s": t, "device": device,
                        "max_abs_diff_vs_first": float((y - ref).abs().max())})
    result = {"rows": res, "meta": run_meta()}
    atomic_write_json(out, result)
    return result


KASHIN_SETTINGS = {
    "lv-fast (eta=0.6, delta=1.0)": KashinConfig(eta=0.6, delta=1.0),
    "lv-default (eta=0.55, delta=0.9)": KashinConfig(),
    "lv-spec (eta=0.5, delta=0.7)": KashinConfig(eta=0.5, delta=0.7),
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
                         "s_per_vector": (time.perf_counter() - t) / x.shape[0]})
    result = {"d": dim, "N": frame.N, "rho": rho, "units": "||x|| / sqrt(N)", "rows": rows, "meta": run_meta()}
    atomic_write_json(out, result)
    return result
