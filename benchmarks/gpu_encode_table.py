"""The table and figure of a ``benchmarks/gpu_encode.sh`` run: every time measured on the CPU and on the GPU of one
machine side by side, with their ratio (CPU / GPU: above 1, the GPU is faster).

Usage: ``python benchmarks/gpu_encode_table.py OUT`` reads ``OUT/encode_<device>_<clients>.json`` and
``OUT/round_<device>.json``, writes ``OUT/gpu_encode.md``, ``OUT/gpu_encode.json`` (atomically) and
``OUT/gpu_encode.png``, and prints the table.  With one device only, the ratio column is empty.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from sstq_fl.io import atomic_write_bytes, atomic_write_json

ENCODE_KEYS = ("encode_s_per_round", "aggregate_s_per_round", "wire_decode_s_per_round")
CLIENT_STAGES = ("gather", "gradients", "clip", "kashin", "encode")
"""The stages of a round that run on the clients' device (the rest run on the CPU in both runs)."""


def _load(out: Path) -> tuple[dict[tuple[str, int], Any], dict[str, Any]]:
    enc, rnd = {}, {}
    for p in sorted(out.glob("encode_*_*.json")):
        m = re.fullmatch(r"encode_(.+)_(\d+)\.json", p.name)
        if m:
            enc[(m.group(1), int(m.group(2)))] = json.loads(p.read_text())
    for p in sorted(out.glob("round_*.json")):
        rnd[p.stem.removeprefix("round_")] = json.loads(p.read_text())
    return enc, rnd


def _pair(cpu: float | None, gpu: float | None) -> dict[str, float | None]:
    return {"cpu_s": cpu, "cuda_s": gpu, "cpu_over_cuda": cpu / gpu if cpu is not None and gpu else None}


def encode_rows(enc: dict[tuple[str, int], Any]) -> list[dict[str, Any]]:
    """One row per (clients, encoder, quantity): the CPU's and the GPU's seconds per round."""
    rows = []
    for clients in sorted({c for _, c in enc}):
        cpu = {r["encoder"]: r for r in enc.get(("cpu", clients), {}).get("rows", [])}
        gpu = {r["encoder"]: r for r in enc.get(("cuda", clients), {}).get("rows", [])}
        for name in dict.fromkeys([*cpu, *gpu]):
            for key in ENCODE_KEYS:
                rows.append({"clients": clients, "encoder": name, "what": key.removesuffix("_s_per_round"),
                             **_pair(cpu.get(name, {}).get(key), gpu.get(name, {}).get(key))})
    return rows


def round_rows(rnd: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (cohort, stage) and per cohort's whole round: the CPU's and the GPU's seconds."""
    by = {dev: {c["clients"]: c for c in res["cohorts"]} for dev, res in rnd.items()}
    rows = []
    for clients in sorted({c for cohorts in by.values() for c in cohorts}):
        cpu, gpu = by.get("cpu", {}).get(clients, {}), by.get("cuda", {}).get(clients, {})
        for stage in CLIENT_STAGES:
            rows.append({"clients": clients, "stage": stage, **_pair(cpu.get("stages_s", {}).get(stage),
                                                                     gpu.get("stages_s", {}).get(stage))})
        rows.append({"clients": clients, "stage": "round (wall)", **_pair(cpu.get("round_s"), gpu.get("round_s"))})
    return rows


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def markdown(machine: str, setting: dict[str, Any], erows: list[dict[str, Any]], rrows: list[dict[str, Any]]) -> str:
    lines = [f"Machine: {machine}.", "", "Encode (batched, reproducible mode), aggregate and wire decode, seconds per "
             f"round at d = {setting['dim']:,}:", "", "| clients | encoder | what | CPU s | GPU s | CPU / GPU |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['clients']:,} | {r['encoder']} | {r['what']} | {_fmt(r['cpu_s'])} | {_fmt(r['cuda_s'])} | "
              f"{_fmt(r['cpu_over_cuda'])} |" for r in erows]
    lines += ["", f"A training round (sstq-fl bench round-cost, {setting['encoder']} on the task {setting['task']}): "
              "the clients' stages on each device, the server's on the CPU; seconds:", "",
              "| clients | stage | CPU s | GPU s | CPU / GPU |", "|---|---|---|---|---|"]
    lines += [f"| {r['clients']:,} | {r['stage']} | {_fmt(r['cpu_s'])} | {_fmt(r['cuda_s'])} | "
              f"{_fmt(r['cpu_over_cuda'])} |" for r in rrows]
    return "\n".join(lines) + "\n"


def machine_of(enc: dict[tuple[str, int], Any], rnd: dict[str, Any]) -> str:
    meta = next(iter([*enc.values(), *rnd.values()]))["meta"]
    gpu = next((r.get("gpu") for r in rnd.values() if r.get("gpu")), None)
    m = meta["machine"]
    return f"{gpu or 'no GPU'}; {m.get('cpus')} CPUs ({m.get('torch_threads')} torch threads); torch " \
           f"{meta['versions'].get('torch')}"


def plot(erows: list[dict[str, Any]], rrows: list[dict[str, Any]], machine: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, rows, label, key in ((axes[0], [r for r in erows if r["what"] == "encode"], "encoder", "encoder"),
                                 (axes[1], rrows, "round stage", "stage")):
        names = [f"{r[key]}\n{r['clients']:,}" for r in rows]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r["cpu_s"] or 0 for r in rows], 0.4, label="CPU")
        ax.bar([x + 0.2 for x in xs], [r["cuda_s"] or 0 for r in rows], 0.4, label="GPU")
        ax.set_xticks(list(xs), names, rotation=70, fontsize=6)
        ax.set(yscale="log", ylabel="seconds per round", title=f"{label} (name, clients)")
        ax.legend(fontsize=7)
    fig.suptitle(f"benchmarks/gpu_encode.sh: CPU beside GPU — {machine}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: gpu_encode_table.py OUT (the folder of a benchmarks/gpu_encode.sh run)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    enc, rnd = _load(out)
    if not enc and not rnd:
        print(f"gpu_encode_table.py: no encode_*.json or round_*.json in {out}", file=sys.stderr)
        return 2
    machine = machine_of(enc, rnd)
    first_round = next(iter(rnd.values()), {})
    setting = {"dim": next(iter(enc.values()), {}).get("dim", 0), "task": first_round.get("task"),
               "encoder": first_round.get("encoder")}
    erows, rrows = encode_rows(enc), round_rows(rnd)
    text = markdown(machine, setting, erows, rrows)
    atomic_write_json(out / "gpu_encode.json", {"machine": machine, **setting, "encode": erows, "round": rrows})
    atomic_write_bytes(out / "gpu_encode.md", text.encode())
    plot(erows, rrows, machine, out / "gpu_encode.png")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
