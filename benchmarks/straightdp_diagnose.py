"""Where StraightDP's moments + DP-SGD row loses what the moment release gave: one run's pieces, sampled apart.

One ``moments+sgd`` run (distillation port) is taken apart and every intermediate model is sampled with the
same labels, noise and evaluation, so the accuracy each stage keeps or loses is measured side by side:

* ``release``: ``z ~ N(μ_y, Σ)`` from the released mixture (the moments' share of ε), the ceiling of the ports;
* ``analytic``: Euler integration of the released mixture's exact (Bayes) field over [0, 1]: the same
  distribution up to discretisation, a check of the sampler;
* ``analytic<τ+M``: the exact field on [0, τ], then model ``M`` on [τ, 1], for ``M`` the public pretrained
  model, the distilled model and the final (DP-SGD) model: what the model's late times lose;
* ``M``: model ``M`` alone from noise, the row as shipped (``final``) and its ingredients;
* ``cfg1``: the final model without guidance amplification (w = 1).

Usage: ``python benchmarks/straightdp_diagnose.py OUT.json [--epsilon 3] [--records 0] [--pca 64] [--rank 32]
[--pretrain-steps 1500] [--distill-steps 300] [--sgd-steps 300] [--probe-seeds 3] [--samples 1000]``.  Writes
``OUT.json`` (atomically) with every sampler's accuracy per probe seed, label agreement and domain-FD.
Randomness is ``secure`` (the release's noise from the OS); the evaluation's seeds are fixed.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sstq_fl.config.straightdp import StraightConfig
from sstq_fl.data.mnist import load_private_split, public_records
from sstq_fl.gen.outputs import heldout_evaluation
from sstq_fl.gen.runner import DPRunner, run_workload
from sstq_fl.gen.straightdp import pipeline as sp
from sstq_fl.gen.straightdp.field import AnalyticField
from sstq_fl.gen.straightdp.flow import to_pixels
from sstq_fl.gen.straightdp.public import pretrained_flow, public_calibration
from sstq_fl.gen.straightdp.training import guided_velocity
from sstq_fl.gen.template import workload_data
from sstq_fl.io import atomic_write_json
from sstq_fl.privacy.errors import Budget

log = logging.getLogger("straightdp_diagnose")


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    for name, default in (("epsilon", 3.0), ("records", 0), ("pca", 64), ("rank", 32), ("pretrain-steps", 1500),
                          ("distill-steps", 300), ("sgd-steps", 300), ("probe-seeds", 3), ("samples", 1000),
                          ("tau", 0.0)):
        p.add_argument(f"--{name}", type=type(default), default=default)
    return p.parse_args(argv)


def _config(a: argparse.Namespace) -> StraightConfig:
    return StraightConfig(method="moments+sgd", port="distill", epsilon=a.epsilon, records=a.records, pca=a.pca,
                          rank=a.rank, pretrain_steps=a.pretrain_steps, distill_steps=a.distill_steps,
                          sgd_steps=a.sgd_steps, tau=a.tau or None, randomness="secure", probe_seeds=a.probe_seeds,
                          dataset_ledger=str(a.out.with_suffix(".dataset_ledger.jsonl")))


def _stages(cfg: StraightConfig) -> dict[str, Any]:
    """The run's pieces: public calibration, the release's mixture and the public, distilled and final models."""
    public_x, public_y = public_records(cfg.resolved("public_records"), "seeded", cfg.seed)
    data = workload_data(cfg)
    pub = public_calibration(cfg, public_x, public_y)
    model = pretrained_flow(cfg, public_x, public_y)
    setup = sp.calibrate(cfg, data.n_decl, pub, model)

    def pipeline(pool: Any) -> dict[str, Any]:
        run = DPRunner(pool, sp.PIPELINE, sp.RELATION, seed=cfg.seed, randomness=cfg.randomness)
        run.ledger.start(sp.full_plan(setup), Budget(cfg.epsilon, cfg.delta))
        mixture, _ = sp.release_moments(run, cfg, setup, pub)
        distilled = sp.distill(copy.deepcopy(model), mixture, pub, cfg)
        final = sp.private_sgd(run, cfg, copy.deepcopy(distilled), setup, pub)
        return {"mixture": mixture, "distilled": distilled, "final": final}

    res = run_workload(pipeline, data, "inprocess", "cpu")
    return {**res, "public": model.eval(), "pub": pub, "setup": setup}


@torch.no_grad()
def _euler(y: torch.Tensor, steps: int, tau: float, field: AnalyticField | None, model: Any, w: float,
           gen: torch.Generator) -> torch.Tensor:
    """Euler from noise: the exact field where ``t < τ`` (if given), else model ``M`` with CFG ``w``."""
    n = len(y)
    x = torch.randn(n, 1, 28, 28, generator=gen)
    for k in range(steps):
        t = torch.full((n,), k / steps)
        if field is not None and k / steps < tau:
            v = field.velocity(x.reshape(n, -1).double(), t.double(), y).float().view(n, 1, 28, 28)
        else:
            v = guided_velocity(model, x, t, y, w)
        x = x + v / steps
    return to_pixels(x).clamp(0, 1)


def _samplers(st: dict[str, Any], n: int, steps: int) -> dict[str, torch.Tensor]:
    y = torch.arange(n) % 10
    field, tau = AnalyticField(st["mixture"]), st["pub"].tau

    def run(fld: AnalyticField | None, model: Any, w: float = sp.CFG_SCALE, cut: float = tau) -> torch.Tensor:
        return _euler(y, steps, cut, fld, model, w, torch.Generator().manual_seed(11))

    z = st["mixture"].sample(y.numpy(), np.random.default_rng(11))
    out = {"release": to_pixels(torch.as_tensor(z, dtype=torch.float32).view(n, 1, 28, 28)).clamp(0, 1),
           "analytic": run(field, st["final"], cut=1.01)}
    for name in ("public", "distilled", "final"):
        out[f"analytic<tau+{name}"] = run(field, st[name])
        out[name] = run(None, st[name])
    out["final_cfg1"] = run(None, st["final"], w=1.0)
    return out


def _evaluate(samples: dict[str, torch.Tensor], cfg: StraightConfig) -> dict[str, Any]:
    """The pipelines' held-out evaluation (:func:`~sstq_fl.gen.outputs.heldout_evaluation`) of every sampler."""
    split = load_private_split(None)
    out = {}
    for name, x in samples.items():
        evals, *_ = heldout_evaluation(x, torch.arange(len(x)) % 10, split, cfg)
        out[name] = {k: evals[k] for k in ("downstream_accuracy", "downstream_accuracy_seeds", "domain_fd",
                                           "sample_label_agreement", "probe_ceiling", "fd_floor")}
        log.info("%-24s accuracy %.4f  agreement %.3f  domain-FD %.0f", name, evals["downstream_accuracy"],
                 evals["sample_label_agreement"], evals["domain_fd"])
    return out


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    a = _args(argv)
    cfg, t0 = _config(a), time.perf_counter()
    st = _stages(cfg)
    samples = _samplers(st, a.samples, cfg.resolved("euler_steps"))
    result = {"command": "python benchmarks/straightdp_diagnose.py " + " ".join(argv),
              "machine": f"{platform.node()} {platform.processor() or platform.machine()}, torch threads "
                         f"{torch.get_num_threads()}", "epsilon": cfg.epsilon, "tau": st["pub"].tau,
              "sigma_moments": st["setup"].sigma_moments, "sigma_sgd": st["setup"].sigma_sgd,
              "epsilon_moments": st["setup"].epsilon_moments, "records": cfg.resolved("records"),
              "samplers": _evaluate(samples, cfg), "probe": "LeNet-5, cpu protocol (2 epochs)",
              "evaluator": "trained on eval_fit (the pipelines' held-out evaluation)"}
    result["wall_s"] = time.perf_counter() - t0
    atomic_write_json(a.out, result)
    print(json.dumps({k: round(v["downstream_accuracy"], 4) for k, v in result["samplers"].items()}))
    return 0


if __name__ == "__main__":
    from sstq_fl.process import ProcessOptions, apply_process_options

    apply_process_options(ProcessOptions())  # the sstq-fl command's process settings (sstq_fl.process)
    sys.exit(main(sys.argv[1:]))
