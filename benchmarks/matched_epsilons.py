"""The per-message ε that meets a central ε target under the shuffler and under no trusted party (the server).

For each target: the largest per-message ε0 (rounded down to 4 decimals) whose central ε over ``--rounds`` rounds of
``--clients`` messages is at most the target: behind a shuffler, the package's shuffled-LDP ledger
(:class:`~sstq_fl.privacy.events.ShuffledLdpEvent`, capped by the local ε); against the server, the exact optimal
composition of ``rounds`` ε0-LDP messages.  Writes JSON to stdout (``--out`` also to a file).

    python benchmarks/matched_epsilons.py --clients 100 --rounds 100 --delta 1e-5 --targets 1 3 8
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from sstq_fl.io import atomic_write_json
from sstq_fl.privacy.events import ShuffledLdpEvent
from sstq_fl.privacy.ldp import capped_central_epsilon
from sstq_fl.privacy.ledger import PrivacyLedger
from sstq_fl.privacy.pure_composition import pure_composition_epsilon


def shuffled(e0: float, clients: int, rounds: int, delta: float) -> float:
    led = PrivacyLedger("replace_one")
    led.record(ShuffledLdpEvent(e0, clients), rounds)
    return capped_central_epsilon(led, e0, rounds, delta)


def largest_below(f, target: float, lo: float = 1e-4, hi: float = 30.0) -> float:
    """The largest ε0 on the 4-decimal grid with ``f(ε0) ≤ target`` (``f`` increasing)."""
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if f(mid) <= target else (lo, mid)
    e0 = math.floor(lo * 1e4) / 1e4
    assert f(e0) <= target
    return e0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--targets", type=float, nargs="+", default=[1.0, 3.0, 8.0])
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    rows = []
    for t in a.targets:
        sh = largest_below(lambda e: shuffled(e, a.clients, a.rounds, a.delta), t)
        loc = largest_below(lambda e: pure_composition_epsilon(e, a.rounds, a.delta), t)
        rows.append({"target": t, "shuffler_epsilon0": sh, "shuffler_central": shuffled(sh, a.clients, a.rounds, a.delta),
                     "server_epsilon0": loc, "server_central": pure_composition_epsilon(loc, a.rounds, a.delta)})
    out = {"clients": a.clients, "rounds": a.rounds, "delta": a.delta, "rows": rows}
    json.dump(out, sys.stdout, indent=1)
    print()
    if a.out:
        atomic_write_json(a.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
