import json
import subprocess
import sys

import pytest

from sstq_fl.cli import main


def test_encoders_listing(capsys):
    assert main(["encoders", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) >= {"clean", "vqsgd", "sqkr", "privunit", "sstq-flat", "sstq-ma"}
    assert rows["sstq-flat"]["bits"] == "ceil(log2(N)) + b" and rows["sstq-flat"]["bits_text"] == "⌈log2 N⌉ + b"
    assert "codebook" in rows["sstq-flat"]["params"]
    assert main(["encoders"]) == 0 and "sstq-ma" in capsys.readouterr().out


def test_mse_vs_dim_small(tmp_path):
    out = tmp_path / "e1.json"
    assert main(["bench", "mse-vs-dim", "--dims", "50,200", "--trials", "50", "--out", str(out),
                 "--encoders", "vqsgd sstq-flat:codebook=optimized sstq-ma"]) == 0
    res = json.loads(out.read_text())
    assert {"epsilon", "bits", "norm", "trials", "rows"} <= set(res)
    assert len(res["rows"]) == 6
    for r in res["rows"]:
        assert {"encoder", "d", "mse", "ci_low", "ci_high", "bits_per_message"} <= set(r)
        assert r["ci_low"] <= r["mse"] <= r["ci_high"]
    sstq = [r for r in res["rows"] if r["encoder"] == "sstq-ma"]
    assert sstq[0]["bits_per_message"] == 7 + 8  # N = 128 at d = 50, b = 8
    assert (tmp_path / "e1.png").stat().st_size > 1000


def test_encode_speed_small(tmp_path):
    out = tmp_path / "s.json"
    assert main(["bench", "encode-speed", "--clients", "4", "--dim", "300", "--reps", "1", "--out", str(out),
                 "--encoders", "sstq-flat vqsgd"]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["encoder"] for r in rows] == ["sstq-flat", "vqsgd"]
    for r in rows:
        assert {"encoder", "encode_s_per_round", "aggregate_s_per_round", "loop_encode_s_per_round", "device",
                "secure_encode_s_per_round", "secure_over_reproducible"} <= set(r)


def test_encode_speed_skips_the_loop_and_the_secure_columns_when_asked(tmp_path):
    out = tmp_path / "s.json"
    assert main(["bench", "encode-speed", "--clients", "4", "--dim", "300", "--reps", "1", "--out", str(out),
                 "--encoders", "sstq-flat", "--no-loop", "--no-secure"]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["encode_s_per_round"] > 0 and row["wire_decode_s_per_round"] > 0
    assert not {"loop_encode_s_per_round", "loop_over_batched", "secure_encode_s_per_round"} & set(row)


def test_encode_speed_gives_the_transform_floor_of_framed_encoders_only(tmp_path):
    """Framed encoders get the frame product's time, the products an encode ran (``1 + 2 × passes``) and their
    product; an encoder without a frame gets none of these columns."""
    out = tmp_path / "s.json"
    assert main(["bench", "encode-speed", "--clients", "4", "--dim", "300", "--reps", "1", "--out", str(out),
                 "--encoders", "sstq-flat:frame=hd3 vqsgd", "--no-loop", "--no-secure"]) == 0
    framed, plain = json.loads(out.read_text())["rows"]
    assert framed["frame_N"] == 1024 and framed["frame_product_s"] > 0
    assert framed["frame_products_per_encode"] == 1 + 2 * framed["stats"]["kashin_passes_mean"]
    assert framed["transform_floor_s_per_round"] == framed["frame_product_s"] * framed["frame_products_per_encode"]
    assert framed["transform_share"] == framed["transform_floor_s_per_round"] / framed["encode_s_per_round"]
    assert "transform_floor_s_per_round" not in plain


def test_errors_are_reported_not_raised(capsys):
    assert main(["bench", "mse-vs-dim", "--dims", "10", "--trials", "5", "--encoders", "nope", "--out", "/tmp/x.json"]) == 2
    assert "unknown encoder 'nope'" in capsys.readouterr().err


def test_console_script_installed():
    out = subprocess.run([sys.executable, "-m", "sstq_fl.cli", "encoders"], capture_output=True, text=True, check=True)
    assert "sstq-flat" in out.stdout


@pytest.mark.parametrize("label, d, eps, trials", [("sstq-ma", 100, 8.0, 2), ("sstq-ma", 10, 8.0, 3),
                                                   ("vqsgd", 2, 8.0, 2), ("privunit", 2, 1.0, 2)])
def test_mse_interval_never_goes_below_zero(label, d, eps, trials):
    """Heavy-tailed squared errors from a few trials: the normal approximation went negative here."""
    from sstq_fl.bench.mse import measure

    r = measure(label, d, eps, 8, 0.2, trials)
    assert 0 <= r["ci_low"] <= r["mse"] <= r["ci_high"]
    assert r["ci_method"].startswith("bootstrap percentile")


def test_a_short_ldp_run_loads_no_accountant_library_and_no_benchmark(tmp_path):
    """A pure-ε training run's start-up (fixed cost of every short run and sweep cell) leaves out
    dp-accounting and scipy (1.1 s: its ledger and RDP cross-check are closed forms), cryptography
    (0.1 s: reproducible coins need no cipher) and the benchmarks' modules (their parsers are built
    without them)."""
    code = ("import sys\nfrom sstq_fl.cli import main\n"
            f"assert main(['run', '--task', 'lsq', '--dim', '20', '--n', '200', '--clients', '4', '--rounds', '1', "
            f"'--encoder', 'sstq-flat:b=4', '--out', {str(tmp_path / 'r')!r}]) == 0\n"
            "loaded = {'dp_accounting', 'scipy', 'cryptography', 'sstq_fl.bench.round_cost', 'sstq_fl.bench.shuffle'}\n"
            "loaded &= set(sys.modules)\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
