"""A Flower SecAgg+ round against a plain Flower round, side by side in one invocation.

Both runs use the same protocol, clients and seed on Flower's simulation engine (one SuperNode per client):

* ``plain``: ``--trust server --encoder clean`` (each node replies its clipped update; the server averages);
* ``secagg``: ``--trust secagg --encoder clean --central-epsilon E`` through Flower's ``SecAggPlusWorkflow`` and
  ``secaggplus_mod`` (four protocol stages a round: setup, key sharing, masked vectors, unmasking).

Each round's seconds are captured from the server (configure to record, as each engine reports them); round 1
holds the Ray actors' start-up and is reported apart; the ratio is the median round of ``secagg`` over the median
of ``plain``.  Writes JSON (and a small markdown table) atomically.

    python benchmarks/flower_secagg.py --clients 100 --rounds 5 --out benchmarks/results/flower_secagg
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from sstq_fl.io import atomic_write_bytes, atomic_write_json


def timed_run(cfg: Any, out: Path) -> dict[str, Any]:
    """Run ``cfg`` on Flower, returning each round's seconds and the final metrics."""
    from sstq_fl.flower.apps import sstq_server

    seconds: list[float] = []
    real = sstq_server.Trainer

    class Timed(real):  # type: ignore[misc, valid-type]
        def complete_round(self, out: Path, st: Any, rec: dict[str, Any], s: float, progress: bool) -> None:
            seconds.append(s)
            super().complete_round(out, st, rec, s, progress)

    sstq_server.Trainer = Timed
    try:
        t0 = time.perf_counter()
        res = sstq_server.run_flower(cfg, out)
        total = time.perf_counter() - t0
    finally:
        sstq_server.Trainer = real
    return {"round_s": seconds, "first_round_s": seconds[0], "median_round_s": statistics.median(seconds[1:]),
            "total_s": total, "final": {k: res["final"].get(k) for k in ("test_accuracy", "distance_to_optimum")}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--task", default="fmnist")
    p.add_argument("--central-epsilon", type=float, default=3.0)
    p.add_argument("--secagg-bits", type=int, default=16)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/flower_secagg"))
    a = p.parse_args(argv)
    if a.rounds < 2:
        p.error("--rounds must be at least 2 (round 1 holds the actors' start-up)")
    from sstq_fl.fl.engine import RunConfig

    base = dict(task=a.task, clients=a.clients, rounds=a.rounds, batch=64, clip=0.1, server_cap=10.0, lr=0.2,
                engine="flower", encoder="clean", seed=0)
    runs = {"plain": RunConfig(**base, trust="server"),
            "secagg": RunConfig(**base, trust="secagg", central_epsilon=a.central_epsilon, secagg_bits=a.secagg_bits)}
    res = {name: timed_run(cfg, a.out / "runs" / name) for name, cfg in runs.items()}
    ratio = res["secagg"]["median_round_s"] / res["plain"]["median_round_s"]
    doc = {"command": "python benchmarks/flower_secagg.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
           "clients": a.clients, "rounds": a.rounds, "task": a.task, "runs": res, "ratio_median_round": ratio}
    atomic_write_json(a.out / "flower_secagg.json", doc)
    rows = [f"| {k} | {v['first_round_s']:.1f} | {v['median_round_s']:.2f} | {v['total_s']:.1f} |" for k, v in res.items()]
    atomic_write_bytes(a.out / "flower_secagg.md", "\n".join([
        f"Flower round wall time, {a.clients} simulated clients, {a.task}, {a.rounds} rounds ({os.cpu_count()} CPUs)", "",
        "| run | round 1 s (actors start) | median later round s | total s |", "|---|---|---|---|", *rows, "",
        f"SecAgg+ / plain (median round): **{ratio:.2f}×**", f"`{doc['command']}`", ""]).encode())
    print(json.dumps({"ratio_median_round": ratio, **{k: v["median_round_s"] for k, v in res.items()}}))
    return 0


if __name__ == "__main__":
    from sstq_fl.process import ProcessOptions, apply_process_options

    apply_process_options(ProcessOptions())  # the sstq-fl command's process settings (sstq_fl.process)
    raise SystemExit(main())
