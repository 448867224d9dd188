"""benchmarks/e2_table.py: the ratio to clean is taken per seed at each cell's last round, then averaged with a
Student-t interval; the gzipped table is read when the plain one is absent."""

import csv
import gzip
import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("e2_table", ROOT / "benchmarks" / "e2_table.py")
assert spec is not None and spec.loader is not None
e2 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(e2)

COLS = ["cell", "encoder_spec", "dim", "seed", "round", "metric_name", "metric"]


def write(path, rows, zipped=False):
    opener = gzip.open(path, "wt", newline="") if zipped else path.open("w", newline="")
    with opener as f:
        w = csv.DictWriter(f, COLS)
        w.writeheader()
        w.writerows(rows)


def rows_for(spec, seed, final, first=1e9):
    return [dict(cell="c", encoder_spec=spec, dim=10, seed=seed, round=r, metric_name="distance_to_optimum", metric=v)
            for r, v in ((1, first), (2, final))]


@pytest.mark.parametrize("zipped", [False, True])
def test_ratio_per_seed_at_the_last_round_with_a_t_interval(tmp_path, zipped):
    data = rows_for("clean", 0, 10.0) + rows_for("clean", 1, 20.0) + rows_for("x", 0, 20.0) + rows_for("x", 1, 60.0)
    write(tmp_path / ("results.csv.gz" if zipped else "results.csv"), data, zipped)
    rows = {r["encoder"]: r for r in e2.collect(tmp_path)}
    assert rows["x"]["ratios"] == [2.0, 3.0]
    q = rows["x"]["ratio_to_clean"]
    half = 12.706204736174696 * math.sqrt(0.5) / math.sqrt(2)  # t_{0.975, 1} · sd / √n
    assert q["mean"] == 2.5 and q["low"] == pytest.approx(2.5 - half) and q["high"] == pytest.approx(2.5 + half)
    assert rows["clean"]["ratio_to_clean"] == {"mean": 1.0, "low": 1.0, "high": 1.0}
    assert "| x | 2.5 [" in e2.markdown(list(rows.values()))


def test_main_refuses_a_folder_without_results(tmp_path, capsys):
    assert e2.main([str(tmp_path)]) == 2
    assert "usage" in capsys.readouterr().err
