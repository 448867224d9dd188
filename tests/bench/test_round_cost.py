"""``sstq-fl bench round-cost`` on a small least-squares round: the JSON's stages, floors and ratios, the
previous methods' times, the plot, and the CLI's table."""

import json
import math

from sstq_fl.bench.round_cost import STAGES, round_cost
from sstq_fl.cli import main


def test_round_cost_writes_stages_floors_and_the_reference(tmp_path):
    out = tmp_path / "rc.json"
    res = round_cost(str(out), [4, 16], task="lsq", encoder="sstq-flat:b=4", rounds=1)
    assert json.loads(out.read_text())["cohorts"][1]["clients"] == 16 and out.with_suffix(".png").stat().st_size > 0
    prim = res["primitives"]["cpu"]
    assert prim["gemm_peak_flops"] > 1e8 and prim["copy_bandwidth"] > 1e8 and 0 < prim["fwht_row_s"] < 1e-2
    for row in res["cohorts"]:
        assert set(row["stages_s"]) == set(STAGES) == set(row["floors_s"]) == set(row["ratio_to_floor"])
        assert row["staged_s"] <= row["round_s"] * 1.01 and row["kashin_passes_mean"] >= 0
        assert row["facts"]["gradient_flops"] > 0 and row["floors_s"]["kashin"] > 0
        assert all(r is None or (math.isfinite(r) and r > 0) for r in row["ratio_to_floor"].values())
        assert {"gradients", "gradients_now", "kashin", "kashin_now"} <= set(row["reference_s"])
        assert row["gradient_method"] == "vmap"  # the least-squares task has no grouped form


def test_the_cli_prints_the_stage_table(tmp_path, capsys):
    out = tmp_path / "rc.json"
    assert main(["bench", "round-cost", "--task", "lsq", "--clients", "3", "--rounds", "1", "--no-reference",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "kashin" in text and "floor_ms" in text and "reference_s" not in json.loads(out.read_text())["cohorts"][0]
