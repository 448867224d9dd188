"""What a Flower-engine run prints: Flower's INFO logs hidden by the command line, one line per round instead."""

import logging
import os
import re

import pytest

pytest.importorskip("flwr")

from sstq_fl.cli import build_parser, main  # noqa: E402
from sstq_fl.flower.logs import flower_logs_hidden  # noqa: E402
from sstq_fl.placement import placement_of  # noqa: E402


def test_compare_on_flower_prints_a_line_per_round_and_no_flower_info(tmp_path, capfd, caplog):
    """One small simulation (4 clients, 2 encoders, 2 rounds): no ``flwr`` record below WARNING is emitted,
    each encoder's rounds are reported as they end, and the sweep moves after each encoder's run."""
    caplog.set_level(logging.DEBUG)
    before = {k for k in os.environ if k.startswith("SSTQ_FL_")}
    args = ["compare", "--engine", "flower", "--task", "lsq", "--dim", "8", "--n", "80", "--clients", "4",
            "--batch", "10", "--rounds", "2", "--encoders", "clean;sstq-flat:b=4", "--out", str(tmp_path)]
    assert main(args) == 0
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("flwr") and r.levelno < logging.WARNING]
    lines = [r.getMessage() for r in caplog.records if r.name == "sstq_fl"]
    assert [line.split(":")[0].split(" (")[0] for line in lines] == [
        "clean rounds 1/2", "clean rounds 2/2", "encoders 1/2", "sstq-flat", "sstq-flat", "encoders 2/2"]
    assert all(re.search(r"distance to optimum .*, eps .*, took [0-9.]+ s$", line) for line in lines if "rounds" in line)
    printed = "".join(capfd.readouterr())
    assert "[ROUND" not in printed and "aggregate_train" not in printed and printed.count(" rounds ") == 4
    assert {k for k in os.environ if k.startswith("SSTQ_FL_")} == before  # the setting travels as an argument


def test_the_switch_hides_only_flowers_info_and_verbose_keeps_it(caplog):
    """On, INFO of ``flwr`` and its children is dropped, WARNING passes, and the logger's level is restored; off
    (a library caller's default, ``--verbose`` on the command line), nothing changes."""
    flower, level = logging.getLogger("flwr"), logging.getLogger("flwr").level
    caplog.set_level(logging.DEBUG)
    with flower_logs_hidden(False):
        flower.info("shown: library default")
    with flower_logs_hidden():
        flower.info("hidden")
        logging.getLogger("flwr.child").info("hidden too")
        flower.warning("warned")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("flwr")] == ["shown: library default", "warned"]
    assert flower.level == level
    parse = build_parser().parse_args
    assert placement_of(parse(["demo"])).quiet_flower and not placement_of(parse(["demo", "--verbose"])).quiet_flower
    assert parse(["demo", "--verbose"]).verbose and not parse(["demo"]).verbose
    assert parse(["run", "--verbose", "--out", "x"]).verbose and parse(["compare", "--verbose", "--out", "x"]).verbose
