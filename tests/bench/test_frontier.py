"""bench frontier: exact points equal the declared MSE, measured ones carry intervals, the frontier is the best
private point within each budget (never a non-private one), resume keeps finished settings, and a file that is
not a frontier result is refused in one line."""

import json

import pytest

from sstq_fl.bench.frontier import frontier_table, run
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.recommend import e1_vector


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("frontier") / "f.json"
    return out, run(str(out), [16], [1.0], trials=100, encoders=["vqsgd", "sstq-ma", "clean"])


def test_points_are_exact_or_measured_with_an_interval(result):
    out, res = result
    rows = res["rows"]
    vq = next(r for r in rows if r["spec"] == "vqsgd")
    assert vq["kind"] == "exact"
    assert vq["mse"] == pytest.approx(float(make_encoder("vqsgd", 16, 1.0).mse(e1_vector(16, 1.0)[None])[0]))
    ma = [r for r in rows if r["encoder"] == "sstq-ma"]
    assert {r["spec"] for r in ma} == {"sstq-ma", *(f"sstq-ma:b={b}" for b in (1, 2, 3, 5, 6, 7, 8))}
    assert all(r["kind"] == "measured" and r["ci_low"] <= r["mse"] <= r["ci_high"] for r in ma)
    assert out.with_suffix(".png").stat().st_size > 10_000 and out.with_suffix(".pdf").read_bytes()[:4] == b"%PDF"


def test_the_frontier_is_the_best_private_point_within_each_budget(result):
    _, res = result
    for f in res["frontier"]:
        fit = [r for r in res["rows"] if r["private"] and r["bits"] <= f["budget"]]
        if fit:
            assert f["best"]["mse"] == min(r["mse"] for r in fit)
            assert not f["best"]["spec"].startswith("clean")
    mses = [f["best"]["mse"] for f in res["frontier"] if f["best"]]
    assert mses == sorted(mses, reverse=True)
    assert frontier_table([]) == []


def test_resume_keeps_the_finished_settings(result, tmp_path):
    out, res = result
    again = run(str(out), [16], [1.0], trials=100, encoders=["vqsgd", "sstq-ma", "clean"], resume=True)
    assert again["rows"] == json.loads(json.dumps(res["rows"]))


def test_a_file_that_is_not_a_frontier_result_is_refused(tmp_path):
    bad = tmp_path / "f.json"
    bad.write_text('{"rows": 3}')
    with pytest.raises(ValueError, match="not a frontier result"):
        run(str(bad), [16], [1.0], encoders=["vqsgd"], resume=True)
    bad.write_text('{"a": 1, "a": 2}')
    with pytest.raises(ValueError, match="not readable JSON"):
        run(str(bad), [16], [1.0], encoders=["vqsgd"], resume=True)


def test_the_markdown_table_names_each_budget_with_intervals(result):
    out, res = result
    text = out.with_suffix(".md").read_text()
    assert [text.count(f"| 16 | 1 | {b} |") for b in (8, 16, 32, 64)] == [1, 1, 1, 1]
    assert "95 % bootstrap interval" in text and "] | 1 |" in text
    assert "`vqsgd` (" in text or "`sstq-ma" in text
