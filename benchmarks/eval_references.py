"""The held-out evaluation's calibration references on the MNIST subset: the evaluator CNN's accuracy on
``eval_score`` and, for each probe (lenet, logreg, mlp) and protocol (cpu: 2 epochs; papers: 10 epochs), the
``probe_ceiling`` (mean and per seed) and ``fd_floor`` of an evaluation of ``N`` samples; then the wall time of
one full :func:`sstq_fl.gen.outputs.evaluate_samples` with a cold and a warm cache.

Usage: ``python benchmarks/eval_references.py OUT.json [N] [SEEDS] [CACHE]`` (default 1,000 samples, 3 probe seeds,
a fresh cache under the output's folder).  Reads only ``priv_test`` (the held-out split).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sstq_fl.config.generative import PROBE_NAMES, PipelineConfig
from sstq_fl.data.mnist import load_private_split
from sstq_fl.data.workload import WorkloadData
from sstq_fl.gen.evaluation import train_evaluator
from sstq_fl.gen.heldout import ProbeProtocol, evaluator_accuracy, heldout_split, references
from sstq_fl.gen.outputs import EVALUATOR_FILE, SampleGrid, evaluate_samples
from sstq_fl.io import atomic_write_json, run_meta


def reference_table(n: int, seeds: int, cache: Path, evaluator_epochs: int) -> dict[str, Any]:
    """The evaluator's accuracy and every (probe, protocol)'s references, each with its wall time."""
    split = load_private_split()
    held = heldout_split(split.test_x, split.test_y)
    t0 = time.perf_counter()
    ev = train_evaluator(held.fit_x, held.fit_y, epochs=evaluator_epochs, seed=0, cache_path=cache / EVALUATOR_FILE)
    out: dict[str, Any] = {"heldout": held.record(), "evaluator_epochs": evaluator_epochs,
                           "evaluator_accuracy": evaluator_accuracy(ev, held), "evaluator_s": time.perf_counter() - t0,
                           "references": []}
    for probe in PROBE_NAMES:
        for protocol, epochs in (("cpu", 2), ("papers", 10)):
            t = time.perf_counter()
            refs = references(held, ev, ProbeProtocol(probe, protocol, epochs, tuple(range(seeds))), n, cache)
            out["references"].append({"probe": probe, "protocol": protocol, "epochs": epochs, **refs,
                                      "wall_s": time.perf_counter() - t})
            print(out["references"][-1], flush=True)
    return out


def full_evaluation_s(n: int, cache: Path, out: Path) -> float:
    """Wall time of one ``evaluate_samples`` (LeNet, cpu protocol, one seed) of ``n`` noisy real-looking samples."""
    split = load_private_split()
    g = np.random.default_rng(0)
    idx = g.permutation(len(split.test_y))[:n]
    x = torch.as_tensor(np.clip(split.test_x[idx] + g.normal(0, 0.2, split.test_x[idx].shape), 0, 1), dtype=torch.float32)
    cfg = PipelineConfig(records=2000, eval_samples=n, probe_epochs=2, cache_dir=str(cache))
    data = WorkloadData("mnist-subset", cfg.clients, cfg.partition, cfg.alpha, cfg.seed, 2000)
    t = time.perf_counter()
    evaluate_samples(x, torch.as_tensor(split.test_y[idx]), data, split, out, SampleGrid("check", 1.0, ""), cfg)
    return time.perf_counter() - t


def main(path: str, n: int = 1000, seeds: int = 3, cache: str = "") -> None:
    dest = Path(path)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(cache) if cache else Path(tmp) / "cache"
        res = reference_table(n, seeds, where, PipelineConfig().evaluator_epochs)
        cold = Path(tmp) / "cold_cache"
        res["full_evaluation_s_cold_cache"] = full_evaluation_s(n, cold, Path(tmp))
        res["full_evaluation_s_warm_cache"] = full_evaluation_s(n, cold, Path(tmp))
    res.update({"samples": n, "probe_seeds": seeds, "meta": run_meta(),
                "command": f"python benchmarks/eval_references.py {path} {n} {seeds}"})
    atomic_write_json(dest, res)
    print({k: v for k, v in res.items() if k != "references"})


if __name__ == "__main__":
    from sstq_fl.process import ProcessOptions, apply_process_options

    apply_process_options(ProcessOptions())  # the sstq-fl command's process settings (sstq_fl.process)
    a = sys.argv[1:]
    if not a:
        raise SystemExit("usage: python benchmarks/eval_references.py OUT.json [N] [SEEDS] [CACHE]")
    main(a[0], int(a[1]) if len(a) > 1 else 1000, int(a[2]) if len(a) > 2 else 3, a[3] if len(a) > 3 else "")
