"""Ledger speed and reference figures (``sstq-fl bench ledger``)."""

from __future__ import annotations

import time
from typing import Any

from ..io import atomic_write_json, run_meta
from ..privacy.events import GaussianEvent, PoissonSampledEvent, PureDpEvent
from ..privacy.ldp import ldp_plan_report
from ..privacy.ledger import PrivacyLedger


def ledger_bench(out: str, steps: int = 10_000, delta: float = 1e-5) -> dict[str, Any]:
    rows = []
    for relation in ("add_or_remove_one", "replace_one"):
        t = time.perf_counter()
        led = PrivacyLedger(relation)
        step = PoissonSampledEvent(0.01, GaussianEvent(1.0))
        for _ in range(steps):
            led.record(step)
        eps = led.epsilon(delta)
        elapsed = time.perf_counter() - t
        rows.append({"relation": relation, "steps": steps, "event": step.to_json(), "epsilon": eps,
                     "epsilon_rdp": led.rdp_epsilon(delta), "record_and_answer_s": elapsed})
    refs = []
    for eps, n in [(0.5, 100), (0.1, 1000), (3.0, 100)]:
        led = PrivacyLedger()
        led.record(PureDpEvent(eps), n)
        refs.append({"per_message": eps, "rounds": n, "pld": led.epsilon(delta), "basic": eps * n,
                     "advanced": ldp_plan_report(eps, n, delta)["advanced"]})
    result = {"delta": delta, "subsampled_gaussian": rows, "pure_eps_references": refs, "meta": run_meta()}
    atomic_write_json(out, result)
    return result
