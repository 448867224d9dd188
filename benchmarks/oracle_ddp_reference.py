"""Runs the authors' distributed-DP reference code on the oracle settings and writes its numbers as JSON.

The reference is google-research/federated, folder ``distributed_dp`` (Apache-2.0; Kairouz, Liu & Steinke,
ICML 2021; Agarwal, Kairouz & Liu, NeurIPS 2021).  This script runs in its own TensorFlow environment, never
in the project's; ``benchmarks/oracle_ddp.py --reference-json`` compares the project's codec and accounting
with its output.  How it was run (the committed JSON came from exactly this, on CPU):

    python3 -m venv /tmp/tfvenv            # Python 3.11
    /tmp/tfvenv/bin/pip install tensorflow-cpu tensorflow-privacy     # brings dp-accounting, dm-tree, absl, scipy
    /tmp/tfvenv/bin/pip install "tensorflow-cpu==2.15.*" "tensorflow==2.15.*" "tensorflow-probability==0.23.*" \
        "tensorflow-estimator==2.15.*"     # tensorflow-privacy 0.9 cannot import under TensorFlow 2.21
    /tmp/tfvenv/bin/pip install --no-deps "tensorflow-privacy==0.8.0"  # the last release exporting
    #                  compute_rdp / get_privacy_spent, which the reference accounting calls (its pin is ~=0.8.0)
    mkdir -p /tmp/ddp_ref && git -C <clone of google-research/federated> archive a5af8c4 distributed_dp \
        | tar -x -C /tmp/ddp_ref
    cd /tmp/ddp_ref && PYTHONPATH=/tmp/ddp_ref TF_CPP_MIN_LOG_LEVEL=3 /tmp/tfvenv/bin/python \
        <this repo>/benchmarks/oracle_ddp_reference.py --commit a5af8c4 \
        --out <this repo>/benchmarks/results/oracle/ddp_reference.json

Versions of that run: tensorflow(-cpu) 2.15.1, tensorflow-probability 0.23.0, tensorflow-privacy 0.8.0,
dp-accounting 0.4.3, numpy 1.26.4, scipy 1.17.1 (commit a5af8c4433c9, 2024-02-20, of google-research/federated).
About 25 minutes on 2 CPU cores.

TensorFlow Federated is not installed: the one module that imports it (``modular_clipping_factory``) is
loaded against a stub, and only its ``modular_clip_by_value`` (pure TensorFlow) is used.  Everything else is
the reference's own code: parameter search (``ddgauss_params`` / ``skellam_params``), ε (``ddgauss_epsilon`` /
``skellam_epsilon``), and the distributed-mean-estimation pipeline of ``dme_run.experiment``
(``generate_client_data``, ``build_ddp_query``, ``compute_dp_average``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import types

import numpy as np

SETTINGS = [
    # name, mechanism, clients n, dim d, bits, target epsilon, rounds, k_stddevs
    ("A", "ddgauss", 100, 1000, 16, 1.0, 1, 4.0),
    ("B", "ddgauss", 1000, 4000, 18, 3.0, 1, 4.0),
    ("C", "ddgauss", 100, 4000, 20, 10.0, 100, 4.0),
    ("D", "ddgauss", 1000, 1000, 16, 3.0, 100, 4.0),
    ("E", "ddgauss", 100, 250, 12, 3.0, 1, 2.0),
    # F: sigma ~1.5 on the grid, so tau > 0, and the reference samples at ceil(sigma) = 2
    ("F", "ddgauss", 1000, 1000, 14, 10.0, 1, 3.0),
    ("G", "dskellam", 100, 1000, 16, 1.0, 1, 4.0),
    ("H", "dskellam", 1000, 1000, 14, 10.0, 1, 3.0),
    ("I", "dskellam", 100, 250, 10, 3.0, 1, 2.0),
]
CLIP = 1.0
DELTA = 1e-5
BETA = math.exp(-0.5)


def _stub_tff() -> None:
    """A stand-in ``tensorflow_federated`` with the names ``modular_clipping_factory`` touches at import."""
    tff = types.ModuleType("tensorflow_federated")
    tff.aggregators = types.SimpleNamespace(UnweightedAggregationFactory=object, SumFactory=object)  # type: ignore[attr-defined]
    tff.templates = types.SimpleNamespace(AggregationProcess=object, MeasuredProcessOutput=object)  # type: ignore[attr-defined]
    sys.modules["tensorflow_federated"] = tff


def reference_params(mech: str, n: int, d: int, bits: int, eps: float, rounds: int, k: float) -> dict:
    """The reference's (γ, σ) for the setting and its ε at them (σ both in input units and on the grid)."""
    from distributed_dp import accounting_utils as au

    padded = int(2 ** math.ceil(math.log2(d)))
    if mech == "ddgauss":
        gamma, sigma = au.ddgauss_params(q=1, epsilon=eps, l2_clip_norm=CLIP, bits=bits, num_clients=n, dim=padded,
                                         delta=DELTA, beta=BETA, steps=rounds, k=k)
        got, order = au.ddgauss_epsilon(gamma, sigma, n, CLIP, BETA, padded, 1, rounds, DELTA)
        scale = 1.0 / gamma
    else:
        scale, sigma = au.skellam_params(epsilon=eps, l2_clip=CLIP, bits=bits, num_clients=n, beta=BETA, dim=padded,
                                         q=1, steps=rounds, delta=DELTA, k=k)
        got, order = au.skellam_epsilon(scale, sigma * math.sqrt(n), CLIP, BETA, padded, 1, rounds, DELTA)
        gamma = 1.0 / scale
    return {"gamma": float(gamma), "local_stddev_input_units": float(sigma), "local_stddev_grid": float(sigma * scale),
            "epsilon": float(got), "order": float(order), "padded": padded}


def reference_mse(mech: str, n: int, d: int, bits: int, params: dict, reps: int, seed: int) -> list[float]:
    """MSE of the decoded mean over ``reps`` runs of the reference's DME pipeline (dme_run.experiment)."""
    import tensorflow as tf
    from distributed_dp import ddpquery_utils, dme_utils

    out = []
    for r in range(reps):
        np.random.seed(seed + r)  # the data; TensorFlow's seed is set once in main(): re-setting it per
        # repetition restarts the random streams of the traced discrete-Gaussian sampler (same noise each time)
        data = dme_utils.generate_client_data(d, n, l2_norm=CLIP)
        query = ddpquery_utils.build_ddp_query(mech, params["local_stddev_input_units"], l2_norm_bound=CLIP, beta=BETA,
                                               padded_dim=params["padded"], scale=1.0 / params["gamma"],
                                               client_template=tf.zeros_like(data[0]))
        avg = dme_utils.compute_dp_average(data, query, is_compressed=True, bits=bits)
        out.append(float(np.mean(np.square(np.asarray(avg, np.float64) - np.mean(data, axis=0, dtype=np.float64)))))
    return out


def main() -> None:
    """Runs every setting and writes the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=0, help="repetitions per setting (0: 40, or 20 where n·p > 102400)")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--commit", default="", help="the google-research/federated commit the files were exported from")
    args = ap.parse_args()
    _stub_tff()
    import tensorflow as tf

    tf.random.set_seed(args.seed)
    rows = []
    for name, mech, n, d, bits, eps, rounds, k in SETTINGS:
        t0 = time.time()
        params = reference_params(mech, n, d, bits, eps, rounds, k)
        reps = args.reps or (40 if n * params["padded"] <= 102_400 else 20)
        mses = reference_mse(mech, n, d, bits, params, reps, args.seed)
        rows.append({"name": name, "mechanism": mech, "clients": n, "dim": d, "bits": bits, "target_epsilon": eps,
                     "rounds": rounds, "k_stddevs": k, "clip": CLIP, "delta": DELTA, "beta": BETA, **params,
                     "mse_of_mean": mses, "seconds": round(time.time() - t0, 1)})
        print(json.dumps({key: rows[-1][key] for key in ("name", "gamma", "local_stddev_grid", "epsilon", "seconds")}),
              flush=True)
    import tensorflow_privacy

    meta = {"source": f"google-research/federated distributed_dp at commit {args.commit or '(not given)'}",
            "tensorflow": tf.__version__, "tensorflow_privacy": getattr(tensorflow_privacy, "__version__", "0.8.0"),
            "seed": args.seed,
            "data": "dme_utils.generate_client_data: n Gaussian vectors normalised to L2 norm = clip, float32"}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "settings": rows}, f, indent=1)


if __name__ == "__main__":
    main()
