"""``sstq-fl bench frame-round``: clipped pairs counted per configuration, the fixed frame's attack visible."""

from __future__ import annotations

import json

from sstq_fl.cli import main


def test_frame_round_counts_pairs_and_the_fixed_frame_is_attacked(tmp_path, capsys):
    out = tmp_path / "fr.json"
    assert main(["bench", "frame-round", "--dim", "500", "--rounds", "3", "--gradients", "0", "--out", str(out)]) == 0
    res = json.loads(out.read_text())["configs"]
    for name in ("hadamard_1.9", "hadamard_1.9_secure", "hadamard_whp", "hd3_1.9"):
        c = res[name]
        assert c["pairs"] == sum(b["pairs"] for b in c["by_input"].values()) > 0
        assert 0 < c["upper95"] < 1 and c["clipped"] <= c["pairs"]
    fixed = res["fixed_1.9"]
    assert fixed["by_input"]["walsh_flat"]["clipped"] == fixed["by_input"]["walsh_flat"]["pairs"] > 0  # tuned to it
    assert res["hadamard_whp"]["public_level"] > 5 and res["hadamard_1.9"]["public_level"] == 1.9
    assert "hadamard_1.9_secure" in capsys.readouterr().out


def test_frame_round_refuses_gradients_off_the_mlp_dimension(capsys, tmp_path):
    assert main(["bench", "frame-round", "--dim", "500", "--out", str(tmp_path / "x.json")]) == 2
    assert "--gradients needs --dim 25450" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
