"""``sstq-fl bench round-cost``: the stages of a training round against what the hardware allows.

A round of the vectorized engine is timed stage by stage (:mod:`sstq_fl.stages`: gather,
gradients, clip, kashin, encode = index draw + quantizer + channel, wire, unpack, decode,
aggregate, ledger, evaluate) at several cohort sizes.  Beside each stage stands its *floor*,
computed from primitives measured on the same machine in the same run:

* ``gemm``: the float32 rate of a 2048³ matrix product (peak) and, for the built-in MLP tasks, of
  the round's first-layer product ``[C·B, n_in] @ [n_in, hidden]`` (the shape the gradients run
  at); a stage's FLOPs are counted by ``torch.utils.flop_counter`` on the stage's own call;
* ``bandwidth``: a 256 MiB tensor copy (bytes read + written per second);
* ``fwht``: seconds per row of the FWHT at the frame's ``N``, on the row chunk Kashin uses.

Floors: gather and clip move their bytes at the copy bandwidth; gradients and evaluate are their
FLOPs at the peak GEMM rate, or their bytes at the bandwidth if that is more (for the MLP tasks the
floor at the first-layer shape's rate is reported beside it); kashin is ``(1 + 2·passes)`` FWHTs
per client (``passes`` the round's mean transform pairs); aggregate is one synthesis (one FWHT) and
the step.  ``encode`` (index draw, quantizer, channel), ``wire``, ``unpack`` and ``decode`` (a few
bytes per message, handled message by message in Python) and ``ledger`` have no floor model; the
JSON gives their microseconds per client.  Stages under 1 % of the round get no ratio.
With ``reference`` the previous methods are timed on the same round: per-client gradients by
``vmap(grad)`` over clients and Kashin with all rows at once (no row chunks).

Timings are a local measurement in reproducible mode (``diagnostics`` on, for the Kashin passes);
none of it is a client's output.
"""

from __future__ import annotations

import logging
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..fl.round_draws import minibatches
from ..io import atomic_write_json, run_meta
from ..stages import recording

if TYPE_CHECKING:  # the engine is imported when a benchmark runs, not when the CLI is built
    from ..config.train import RunConfig
    from ..fl.engine import Trainer
    from ..fl.engine_task import EngineTask

log = logging.getLogger("sstq_fl.bench")
STAGES = ("gather", "gradients", "clip", "kashin", "encode", "wire", "unpack", "decode", "aggregate", "ledger",
          "evaluate")
NEGLIGIBLE = 0.01
"""Stages below this share of the round get no floor ratio."""


def timed(fn: Callable[[], Any], reps: int = 3, sync: bool = False) -> float:
    """Median seconds of ``fn()`` over ``reps`` calls after one untimed call."""
    fn()
    out = []
    for _ in range(reps):
        if sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def primitives(device: str, n_frame: int, chunk: int) -> dict[str, float]:
    """The machine's measured rates: peak GEMM (FLOP/s), copy bandwidth (bytes/s), FWHT (seconds per row of
    ``n_frame`` on ``chunk`` rows)."""
    from ..encoders.maths.fwht import fwht_

    sync = device.startswith("cuda")
    a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
    peak = 2 * 2048**3 / timed(lambda: a @ b, sync=sync)
    src = torch.randn(1 << 26, device=device)
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() * 4 / timed(lambda: dst.copy_(src), sync=sync)
    rows = torch.randn(chunk, n_frame, device=device)
    fwht_row = timed(lambda: fwht_(rows), reps=10, sync=sync) / chunk
    return {"gemm_peak_flops": peak, "copy_bandwidth": bandwidth, "fwht_row_s": fwht_row, "fwht_rows_per_call": chunk,
            "fwht_n": n_frame}


def shaped_rate(task: EngineTask, records: int, device: str = "cpu") -> float | None:
    """FLOP/s of an MLP task's first-layer product over ``records`` rows on ``device`` (``None`` for other
    tasks)."""
    from ..fl.tasks import MLPTask

    if not isinstance(task, MLPTask):
        return None
    x, w = torch.randn(records, task.n_in, device=device), torch.randn(task.n_in, task.hidden, device=device)
    return 2 * records * task.n_in * task.hidden / timed(lambda: x @ w, sync=device != "cpu")


def flops(fn: Callable[[], Any]) -> int:
    """FLOPs of ``fn()`` as ``torch.utils.flop_counter`` counts them (matrix products and convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        fn()
    return int(fc.get_total_flops())


def round_batch(tr: Trainer, clients: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Round 1's minibatches of the first ``clients`` clients (``[clients, B, …]``), gathered once for the floors
    and the reference timings."""
    cfg, d, ids = tr.cfg, tr.task.data, np.arange(clients)
    idx = minibatches([tr.clients.shards[c] for c in ids], cfg.batch, cfg.seed, 1, ids)
    return d.x_train[idx], d.y_train[idx]


def round_facts(tr: Trainer, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> dict[str, Any]:
    """The FLOPs and bytes a round on the batch ``xb, yb`` must process (shapes only: the values do not matter)."""
    cfg, task, clients = tr.cfg, tr.task, xb.shape[0]
    item = theta.element_size()
    return {"clients": clients, "batch": cfg.batch, "dim": task.dim,
            "gather_bytes": 2 * (xb.numel() * xb.element_size() + yb.numel() * yb.element_size()),
            "gradient_flops": flops(lambda: task.client_grads(theta, xb, yb)),
            "gradient_bytes": xb.numel() * xb.element_size() + clients * task.dim * item,
            "clip_bytes": 2 * clients * task.dim * item, "evaluate_flops": flops(lambda: task.evaluate(theta)),
            "step_bytes": 3 * task.dim * item}


def measure_rounds(tr: Trainer, rounds: int, sync: bool) -> tuple[dict[str, float], float, float, list[bytes]]:
    """Median exclusive seconds per stage over ``rounds`` rounds (after the engine's warm-up), the median round
    wall time, the mean Kashin transform pairs per client, and the last round's messages."""
    with tempfile.TemporaryDirectory() as tmp:
        st = tr.initial_state(Path(tmp), False)
    tr.warm_up(st)
    per: list[dict[str, float]] = []
    walls, passes = [], []
    for _ in range(rounds):
        with recording(sync=sync) as rec:
            t0 = time.perf_counter()
            out = tr.run_round(st)
            walls.append(time.perf_counter() - t0)
        st.round += 1
        per.append(rec.seconds)
        passes.append(out.get("encode_stats", {}).get("kashin_passes_mean", 0.0))
    stages = {s: statistics.median(p.get(s, 0.0) for p in per) for s in STAGES}
    assert st.theta is not None
    blobs, _ = tr.client_messages(st.theta, st.round + 1, np.arange(min(8, tr.cfg.clients)))
    return stages, statistics.median(walls), float(np.mean(passes)), blobs


def stage_floors(facts: dict[str, Any], prim: dict[str, float], passes: float, kashin: bool) -> dict[str, float]:
    """Each stage's floor in seconds (module doc); ``kashin`` whether the encoder has a Kashin stage."""
    bw, rate = prim["copy_bandwidth"], prim["gemm_peak_flops"]
    c = facts["clients"]
    return {
        "gather": facts["gather_bytes"] / bw,
        "gradients": max(facts["gradient_flops"] / rate, facts["gradient_bytes"] / bw),
        "clip": facts["clip_bytes"] / bw,
        "kashin": c * (1 + 2 * passes) * prim["fwht_row_s"] if kashin else 0.0,
        "encode": 0.0, "wire": 0.0, "unpack": 0.0, "decode": 0.0,
        "aggregate": (prim["fwht_row_s"] if kashin else 0.0) + facts["step_bytes"] / bw,
        "ledger": 0.0, "evaluate": facts["evaluate_flops"] / prim["gemm_peak_flops"],
    }


def reference_times(tr: Trainer, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> dict[str, float]:
    """The previous methods on one round's batch: ``vmap`` gradients, and Kashin with every row at once."""
    from ..encoders.maths.kashin import kashin
    from ..fl.engine_task import EngineTask

    task, clients = tr.task, xb.shape[0]
    out = {"gradients": timed(lambda: EngineTask.client_grads(task, theta, xb, yb), reps=1),
           "gradients_now": timed(lambda: task.client_grads(theta, xb, yb), reps=1)}
    frame, cfg_k = getattr(tr.enc, "frame", None), getattr(tr.enc, "kashin_cfg", None)
    if frame is not None and cfg_k is not None:
        x = tr.enc.preprocess(task.client_grads(theta, xb, yb))
        j = torch.randint(0, frame.N, (clients, 1))
        out["kashin_now"] = timed(lambda: kashin(frame, x, cfg_k, j), reps=1)
        chunk = frame.row_chunk
        frame.row_chunk = lambda dtype: None  # type: ignore[method-assign]
        try:
            out["kashin"] = timed(lambda: kashin(frame, x, cfg_k, j), reps=1)
        finally:
            frame.row_chunk = chunk  # type: ignore[method-assign]
    return out


def cohort(base: RunConfig, task: EngineTask, clients: int, rounds: int, prim: dict[str, float], reference: bool,
           sync: bool) -> dict[str, Any]:
    """One cohort size: stage times, floors, ratios (and the previous methods' times with ``reference``)."""
    from ..fl.engine import Trainer

    tr = Trainer(replace(base, clients=clients, rounds=rounds + 1), task=task)
    stages, wall, passes, blobs = measure_rounds(tr, rounds, sync)
    theta = task.init_params(base.seed)
    xb, yb = round_batch(tr, clients)
    facts = round_facts(tr, theta, xb, yb)
    floors = stage_floors(facts, prim, passes, hasattr(tr.enc, "frame"))
    total = sum(stages.values())
    ratio = {s: (stages[s] / floors[s] if floors[s] > 0 and stages[s] >= NEGLIGIBLE * total else None)
             for s in STAGES}
    row = {"clients": clients, "round_s": wall, "staged_s": total, "per_client_ms": 1e3 * wall / clients,
           "kashin_passes_mean": passes, "message_bytes": float(np.mean([len(b) for b in blobs])),
           "us_per_client": {s: 1e6 * stages[s] / clients for s in STAGES}, "stages_s": stages, "floors_s": floors,
           "ratio_to_floor": ratio,
           "facts": facts, "gradient_method": task.grad_method}
    rate = shaped_rate(task, clients * base.batch, base.device)
    if rate is not None:
        row["first_layer_gemm_flops"] = rate
        row["first_layer_rate_gradient_floor_s"] = facts["gradient_flops"] / rate
    if reference:
        row["reference_s"] = reference_times(tr, theta, xb, yb)
    log.info("%d clients: round %.3f s (%s)", clients, wall, ", ".join(f"{s} {stages[s]:.3f}" for s in STAGES))
    return row


def round_cost(out: str, clients: list[int], task: str = "fmnist", encoder: str = "sstq-flat:b=4", rounds: int = 2,
               reference: bool = True, data_dir: str | None = None, device: str = "cpu") -> dict[str, Any]:
    """``bench round-cost`` with the clients' side of each round on ``device`` (the server side on the CPU); the
    floors come from the primitives measured on that device (the CPU's and, where CUDA is present, the GPU's
    are both recorded); writes ``out`` and its plot."""
    from ..config.train import RunConfig
    from ..fl.engine import Trainer
    from ..fl.tasks import make_task
    from .round_cost_plot import plot_round_cost

    base = RunConfig(task=task, encoder=encoder, clients=max(clients), rounds=rounds + 1, diagnostics=True,
                     data_dir=data_dir, device=device)
    t = make_task(base.task, base.seed, **base.task_kwargs())
    probe = Trainer(replace(base, clients=1, rounds=1), task=t)
    frame = getattr(probe.enc, "frame", None)
    n_frame = frame.N if frame is not None else 1 << max(1, math.ceil(math.log2(2.5 * t.dim)))
    chunk = (frame.row_chunk(torch.float32) if frame is not None else None) or 64
    prim = {"cpu": primitives("cpu", n_frame, chunk)}
    if torch.cuda.is_available():
        prim["cuda"] = primitives("cuda", n_frame, 1000)
    on_gpu = base.device != "cpu"
    rows = [cohort(base, t, c, rounds, prim["cuda" if on_gpu else "cpu"], reference and not on_gpu, sync=on_gpu)
            for c in clients]
    res = {"task": task, "encoder": encoder, "device": base.device,
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "rounds_timed": rounds,
           "primitives": prim, "cohorts": rows, "meta": run_meta()}
    atomic_write_json(out, res)
    plot_round_cost(res, Path(out).with_suffix(".png"))
    return res
