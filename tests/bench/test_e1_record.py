"""The committed E1 result records every key that changes it: each row's spec is its encoder's full canonical spec
today (a new parameter, or a changed default, makes this fail until e1.json is regenerated), and the command it
records is the one benchmarks/README.md names for it."""

import json
from pathlib import Path

from sstq_fl.encoders import make_encoder

ROOT = Path(__file__).resolve().parents[2]
E1 = ROOT / "benchmarks" / "results" / "e1.json"


def test_every_e1_row_records_its_full_spec():
    res = json.loads(E1.read_text())
    for row in res["rows"]:
        enc = make_encoder(row["spec"], row["d"], res["epsilon"], radius=res["norm"])
        assert enc.spec == row["spec"], f"{row['encoder']} at d={row['d']}: regenerate e1.json"
        assert enc.payload_bits() == row["bits_per_message"]


def test_e1_was_made_by_the_command_the_readme_names():
    command = json.loads(E1.read_text())["meta"]["command"]
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    assert f"`{command}`" in readme
