"""A secure Fashion-MNIST round beside a reproducible one, side by side in one process.

Both runs: 100 clients, the E3 MLP (d = 25,450), ``sstq-flat:b=4`` and ``sqkr`` at ε = 3, per-round frames.
Secure randomness draws a fresh OS-CSPRNG key per client and runs the Kashin step on its short public schedule
(``secure_iters``) on every row; reproducible randomness derives every coin from the seed and stops each row at
convergence.  The runs alternate (secure, reproducible, …) so a change of load on the machine hits both alike;
the median round wall time of each is reported with their ratio.

    python benchmarks/secure_round.py --out benchmarks/results/frame_round/secure_round.json [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sstq_fl.config.train import RunConfig
from sstq_fl.fl.engine import Trainer
from sstq_fl.io import atomic_write_json, run_meta
from sstq_fl.progress import configure_logging


def round_times(encoder: str, randomness: str, rounds: int, out: Path) -> list[float]:
    """Wall seconds of each of ``rounds`` rounds (the one-time warm-up excluded)."""
    tr = Trainer(RunConfig(task="fmnist", encoder=encoder, epsilon=3.0, clients=100, rounds=rounds,
                           randomness=randomness, lr=0.5, clip=0.5))
    st = tr.initial_state(out, False)
    tr.out = out
    tr.warm_up(st)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        tr.complete_round(out, st, tr.run_round(st), 0.0, False)
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--encoders", nargs="+", default=["sstq-flat:b=4", "sqkr"])
    args = p.parse_args()
    configure_logging()
    rows = []
    for enc in args.encoders:
        got: dict[str, list[float]] = {"secure": [], "reproducible": []}
        for rep in range(2):
            for mode in got:
                with tempfile.TemporaryDirectory() as tmp:
                    got[mode] += round_times(enc, mode, args.rounds, Path(tmp) / f"{mode}{rep}")
        med = {m: statistics.median(v) for m, v in got.items()}
        rows.append({"encoder": enc, "secure_round_s": med["secure"], "reproducible_round_s": med["reproducible"],
                     "secure_over_reproducible": med["secure"] / med["reproducible"], "rounds_timed": len(got["secure"])})
        print(rows[-1])
    atomic_write_json(args.out, {"meta": run_meta(), "command": "python benchmarks/secure_round.py --out " + args.out,
                                 "rows": rows})
    return 0


if __name__ == "__main__":
    from sstq_fl.process import ProcessOptions, apply_process_options

    apply_process_options(ProcessOptions())  # the sstq-fl command's process settings (sstq_fl.process)
    raise SystemExit(main())
