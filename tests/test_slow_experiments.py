"""Full-size experiment checks (``pytest -m slow``): E1's shape as the spec predicts."""

import math

import pytest

from sstq_fl.bench.mse import run


@pytest.mark.slow
def test_e1_full_shape(tmp_path):
    res = run([100, 500, 1000, 5000, 10000], 3.0, 8, 0.2, 1000, str(tmp_path / "e1.json"))
    by = {}
    for r in res["rows"]:
        by.setdefault(r["encoder"], {})[r["d"]] = r

    def slope(label):
        return math.log(by[label][10000]["mse"] / by[label][100]["mse"]) / math.log(100)

    assert 2.8 < slope("vqsgd") < 3.2
    for label in ["sqkr", "privunit", "sstq-flat:codebook=uniform", "sstq-flat:codebook=optimized", "sstq-ma",
                  "sstq-ma:decode=identity"]:
        assert 0.8 < slope(label) < 1.2, label
    for d in by["sstq-ma:decode=identity"]:  # the spec's decoder: far below flat RR at b = 8
        assert by["sstq-flat:codebook=uniform"][d]["mse"] > 50 * by["sstq-ma:decode=identity"][d]["mse"]
        assert by["sstq-flat:codebook=uniform"][d]["mse"] > 3 * by["sstq-flat:codebook=optimized"][d]["mse"]
    assert res["wall_s"] < 300
