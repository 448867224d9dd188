"""Clients per round at scale: the Flower engine with cohort nodes against the in-process engine.

``python -m sstq_fl.bench.flower_scale --clients 1000 10000 --per-node 250 1000 --out DIR`` runs,
for each size, the in-process (vectorized) engine and the Flower engine (``clients_per_node``
virtual clients per simulated node, Ray started locally) side by side, each in a child process
of its own, and writes ``DIR/scale.json`` and ``DIR/scale.png``.  Per run: each round's wall time
(the engines' own round clock: :meth:`sstq_fl.fl.engine.Trainer.complete_round`'s seconds; the
Flower engine's round 1 holds its Ray actors' start-up and is reported apart), the peak memory of
the child's whole process tree (driver, Ray's GCS and raylet, the actors: the sum of their PSS
from ``/proc/PID/smaps_rollup``, sampled every 0.5 s, so shared pages count once) and the wire
bytes per round (LDP uplink messages; the model sent to each node).  ``--flower-only`` sizes run
the Flower engine alone (where the in-process engine does not fit in memory).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_CHILD = """
import json, sys, time
from pathlib import Path
from sstq_fl.process import ProcessOptions, apply_process_options
apply_process_options(ProcessOptions())  # the command line's process settings, before torch loads
import sstq_fl.fl.engine as E
spec = json.loads(sys.argv[1])
secs = []
orig = E.Trainer.complete_round
def timed(self, out, st, rec, seconds, progress):
    secs.append(seconds)
    return orig(self, out, st, rec, seconds, progress)
E.Trainer.complete_round = timed
t0 = time.perf_counter()
res = E.run(E.RunConfig(**spec["config"]), Path(spec["out"]), progress=False)
print("RESULT " + json.dumps({"round_s": secs, "process_s": time.perf_counter() - t0, "rounds": res["rounds"],
                              "final": res["final"]}), flush=True)
"""


def tree_pss(root: int) -> int:
    """Bytes of PSS of ``root`` and all its descendants (``/proc``; processes that vanish are skipped)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def run_child(config: dict[str, Any], out: Path) -> dict[str, Any]:
    """Run one config in a child process; its result with the peak PSS of its process tree."""
    spec = json.dumps({"config": config, "out": str(out)})
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, spec], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_pss(proc.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert proc.stdout is not None
    lines = proc.stdout.read().splitlines()
    proc.wait()
    done.set()
    sampler.join()
    found = [ln for ln in lines if ln.startswith("RESULT ")]
    if proc.returncode or not found:
        raise RuntimeError(f"{config['engine']} run failed (exit {proc.returncode}):\n" + "\n".join(lines[-30:]))
    return {**json.loads(found[-1][len("RESULT "):]), "peak_pss_bytes": peak[0]}


def summarize(engine: str, got: dict[str, Any], dim: int, nodes: int) -> dict[str, Any]:
    """One run's row: round times (Flower: round 1 apart), peak memory, wire bytes per round."""
    secs = got["round_s"]
    timed = secs[1:] if engine == "flower" and len(secs) > 1 else secs
    last = got["rounds"][-1]
    up = int(sum(r["clients"] * r.get("bytes_per_client", 0) for r in got["rounds"]) / len(got["rounds"]))
    return {"engine": engine, "round_s": secs, "first_round_s": secs[0], "median_round_s": statistics.median(timed),
            "peak_memory_gib": got["peak_pss_bytes"] / 2**30, "process_s": got["process_s"],
            "uplink_ldp_bytes_per_round": up, "bytes_per_client": last.get("bytes_per_client"),
            "downlink_model_bytes_per_round": nodes * 4 * dim if engine == "flower" else 0,
            "messages_per_round": nodes if engine == "flower" else 0,
            "test_accuracy": last.get("test_accuracy"), "train_loss": last.get("train_loss"),
            "epsilon_total": got["final"]["epsilon_total"]}


def load() -> dict[str, Any]:
    """The machine's load average and ``uptime`` line (the machine may be shared)."""
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {"loadavg": list(os.getloadavg()), "uptime": up}


def measure(n: int, per_node: int, args: argparse.Namespace, dim: int, flower_only: bool) -> list[dict[str, Any]]:
    """Both engines (or the Flower engine alone) at ``n`` clients per round; their rows."""
    base = {"task": args.task, "encoder": args.encoder, "clients": n, "rounds": args.rounds, "batch": args.batch,
            "randomness": "reproducible", "seed": 0}
    rows = []
    for engine in (["flower"] if flower_only else ["vectorized", "flower"]):
        cfg = {**base, "engine": engine, "clients_per_node": per_node if engine == "flower" else 1}
        before = load()
        got = run_child(cfg, Path(args.work) / f"{engine}-{n}")
        nodes = -(-n // per_node)
        rows.append({"clients": n, "clients_per_node": cfg["clients_per_node"], "nodes": nodes if engine == "flower" else 0,
                     **summarize(engine, got, dim, nodes), "load_before": before, "load_after": load()})
        print(json.dumps({k: rows[-1][k] for k in ("engine", "clients", "round_s", "peak_memory_gib")}), flush=True)
    if not flower_only:
        rows[-1]["max_rel_diff_from_inprocess"] = max_rel_diff(Path(args.work), n)
    return rows


def max_rel_diff(work: Path, n: int) -> float:
    """The largest relative difference of any per-round float metric between the two engines' runs at ``n``
    clients (their ``metrics.json``; reproducible mode: equal up to float rounding); ``inf`` if the
    rounds' fields or their other values differ."""
    a, b = (json.loads((work / f"{e}-{n}" / "metrics.json").read_text())["rounds"] for e in ("vectorized", "flower"))
    worst = 0.0
    for ra, rb in zip(a, b, strict=True):
        if ra.keys() != rb.keys():
            return float("inf")
        for k, va in ra.items():
            if isinstance(va, float):
                worst = max(worst, abs(va - rb[k]) / max(abs(va), 1e-300))
            elif va != rb[k]:
                return float("inf")
    return worst


def unit_costs(task: str, encoder: str, batch: int, cohort: int = 1000, server_clients: int = 20000) -> dict[str, Any]:
    """The capacity model's per-client costs on this machine, one thread: a cohort node's seconds per
    virtual client (batched gradient and encode of ``cohort`` clients) and the server's seconds per
    message (validate, decode and aggregate ``server_clients`` wire messages: the in-process engine's
    and the Flower server's :func:`sstq_fl.aggregation.decode_mean`), and the bytes of one message."""
    import numpy as np
    import torch

    from ..aggregation import decode_mean
    from ..config.train import RunConfig
    from ..fl.engine import Trainer

    torch.set_num_threads(1)
    tr = Trainer(RunConfig(task=task, encoder=encoder, clients=cohort, batch=batch, rounds=1))
    theta, ids = tr.task.init_params(0), np.arange(cohort)
    tr.client_messages(theta, 1, ids[:8])  # warm-up
    t0 = time.perf_counter()
    blobs, _ = tr.client_messages(theta, 1, ids)
    node_s = (time.perf_counter() - t0) / cohort
    many = blobs * (server_clients // cohort)
    decode_mean(tr.enc, many[:100], 1, 10.0)  # warm-up
    t0 = time.perf_counter()
    decode_mean(tr.enc, many, 1, 10.0)
    server_s = (time.perf_counter() - t0) / len(many)
    return {"node_s_per_client_one_thread": node_s, "server_s_per_message_one_thread": server_s,
            "message_bytes": len(blobs[0]), "model_bytes": 4 * tr.task.dim, "cohort": cohort,
            "server_messages_timed": len(many), "load": load()}


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Round time and peak memory against clients per round, per engine."""
    from matplotlib.figure import Figure

    from ..plots import save

    fig = Figure(figsize=(11, 4.5))
    a, b = fig.subplots(1, 2)
    for engine, marker in (("vectorized", "o"), ("flower", "s")):
        rs = sorted((r for r in rows if r["engine"] == engine), key=lambda r: r["clients"])
        label = "in-process (vectorized)" if engine == "vectorized" else "Flower + Ray, cohort nodes"
        a.plot([r["clients"] for r in rs], [r["median_round_s"] for r in rs], marker=marker, label=label)
        b.plot([r["clients"] for r in rs], [r["peak_memory_gib"] for r in rs], marker=marker, label=label)
    a.set(xscale="log", yscale="log", xlabel="clients per round", ylabel="round wall time (s, median)")
    b.set(xscale="log", xlabel="clients per round", ylabel="peak memory, process tree PSS (GiB)", ylim=(0, None))
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    save(fig, path, dpi=120)  # atomic, like the JSON beside it


def main(argv: list[str] | None = None) -> None:
    """Parse the sizes, measure them, write ``scale.json`` and ``scale.png``."""
    from ..fl.tasks import make_task

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--per-node", type=int, nargs="+", default=[250, 1000], help="clients per node, one per size")
    p.add_argument("--flower-only", type=int, nargs="*", default=[], help="sizes run on the Flower engine alone")
    p.add_argument("--flower-only-per-node", type=int, default=1000)
    p.add_argument("--task", default="fmnist")
    p.add_argument("--encoder", default="sstq-flat:b=4")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--work", default="/tmp/sstq-flower-scale")
    p.add_argument("--command", default="python -m sstq_fl.bench.flower_scale")
    p.add_argument("--out", required=True)
    p.add_argument("--costs-only", action="store_true", help="measure the per-client unit costs into costs.json only")
    args = p.parse_args(argv)
    if args.costs_only:
        from ..io import atomic_write_json, run_meta

        atomic_write_json(Path(args.out) / "costs.json", {**unit_costs(args.task, args.encoder, args.batch),
                                                          "meta": {**run_meta(), "command": args.command}})
        return
    dim = make_task(args.task, 0).dim
    rows: list[dict[str, Any]] = []
    for n, m in [*zip(args.clients, args.per_node), *[(n, args.flower_only_per_node) for n in args.flower_only]]:
        rows += measure(n, m, args, dim, n in args.flower_only)
        write(rows, args, dim)  # after each size: a long run's finished sizes are kept


def write(rows: list[dict[str, Any]], args: argparse.Namespace, dim: int) -> None:
    """``scale.json`` (rows, Flower / in-process ratios, what produced it) and ``scale.png``, atomically."""
    from ..io import atomic_write_json, run_meta

    ratios = {str(n): _ratio(rows, n) for n in sorted({r["clients"] for r in rows})}
    meta = {**run_meta(), "command": args.command, "load_at_end": load()}
    out = Path(args.out)
    atomic_write_json(out / "scale.json", {"task": args.task, "encoder": args.encoder, "batch": args.batch, "dim": dim,
                                           "rounds": args.rounds, "rows": rows, "flower_over_inprocess_round": ratios,
                                           "meta": meta})
    plot(rows, out / "scale.png", f"{args.command}\n{args.task}, {args.encoder}, batch {args.batch}, {meta['time_utc']}, "
         f"{meta['machine']['cpus']} CPUs, load {meta['load_at_end']['loadavg'][0]:.1f}: Flower / in-process round = "
         + ", ".join(f"{k} clients {v:.2f}" for k, v in ratios.items() if v))


def _ratio(rows: list[dict[str, Any]], n: int) -> float | None:
    """The Flower engine's median round time over the in-process engine's at ``n`` clients."""
    by = {r["engine"]: r["median_round_s"] for r in rows if r["clients"] == n}
    return by["flower"] / by["vectorized"] if len(by) == 2 else None


if __name__ == "__main__":
    main()
