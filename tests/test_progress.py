"""Logging and progress (sstq_fl.progress): one handler however often it is configured, log lines
instead of a bar off a terminal, and report() feeding the bar a caller opened."""

import io
import logging
import subprocess
import sys

import pytest

from sstq_fl import progress as prog


@pytest.fixture
def clean_logger():
    """The sstq_fl logger as it was before the test (configure_logging changes it)."""
    logger = logging.getLogger("sstq_fl")
    handlers, level = list(logger.handlers), logger.level
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)


def test_configure_logging_is_idempotent_and_leaves_root_and_flower_alone(clean_logger):
    clean_logger.handlers[:] = []
    root, flwr = list(logging.getLogger().handlers), list(logging.getLogger("flwr").handlers)
    assert prog.configure_logging() is clean_logger
    prog.configure_logging("DEBUG")
    assert [h.get_name() for h in clean_logger.handlers] == ["sstq_fl"]
    assert clean_logger.level == logging.DEBUG
    assert logging.getLogger().handlers == root and logging.getLogger("flwr").handlers == flwr


def test_info_lines_reach_stderr_after_configure_logging(clean_logger, capsys):
    clean_logger.handlers[:] = []
    logging.getLogger("sstq_fl.gen").info("before: dropped")  # no handler yet, INFO is below the last resort
    prog.configure_logging()
    logging.getLogger("sstq_fl.gen").info("generator step %d", 7)
    err = capsys.readouterr().err
    assert "INFO sstq_fl.gen: generator step 7" in err and "before" not in err


def test_a_fresh_process_logs_info_to_stderr_once():
    code = ("import logging; from sstq_fl.progress import configure_logging; configure_logging(); configure_logging(); "
            "logging.getLogger('sstq_fl.fl').info('hello %s', 'there')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout == ""
    assert res.stderr.count("hello there") == 1 and "INFO sstq_fl.fl" in res.stderr


def test_off_a_terminal_progress_logs_about_every_tenth_and_the_end(caplog):
    with caplog.at_level(logging.INFO, logger="sstq_fl"):
        with prog.progress(25, "steps", terminal=False) as bar:
            for i in range(25):
                bar.advance(loss=1.0 / (i + 1))
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0] for line in lines] == [f"steps {n}/25" for n in (3, 6, 9, 12, 15, 18, 21, 24, 25)]
    assert lines[-1].endswith("loss 0.04") and "100 %" in lines[-1]


def test_every_and_level_are_honoured(caplog):
    with caplog.at_level(logging.INFO, logger="sstq_fl"):
        with prog.progress(3, "rounds", every=1, terminal=False) as bar:
            bar.update(1)
            bar.update(3, eps=float("inf"))  # a resumed or skipping loop: absolute positions
        with prog.progress(100, "inner", level=logging.DEBUG, terminal=False) as inner:
            inner.advance(100)
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["rounds 1/3", "rounds 3/3"]
    assert caplog.records[-1].getMessage().endswith("eps inf")


def test_report_moves_the_open_progress_with_its_key_else_logs(caplog):
    with caplog.at_level(logging.INFO, logger="sstq_fl"):
        prog.report("rounds", 2, 5, label="clean", loss=0.5)
        with prog.progress(5, "sqkr rounds", key="rounds", every=5, terminal=False) as bar:
            prog.report("rounds", 4, 5, label="sqkr", loss=0.25)
            assert bar.completed == 4 and bar.fields == {"loss": 0.25}
            prog.report("rounds", 5, 5, label="sqkr", loss=0.125)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "clean rounds 2/5: loss 0.5"
    assert len(lines) == 2 and lines[1].startswith("sqkr rounds 5/5 (100 %") and lines[1].endswith("loss 0.125")


def test_on_a_terminal_a_bar_is_drawn_and_its_last_line_logged(caplog, monkeypatch):
    from rich.console import Console

    monkeypatch.setattr(prog, "_console", Console(file=io.StringIO(), force_terminal=True))
    with caplog.at_level(logging.INFO, logger="sstq_fl"):
        with prog.progress(4, "outer", terminal=True) as outer:
            with prog.progress(10, "inner", terminal=True) as inner:
                assert prog._live is not None and len(prog._live.tasks) == 2
                inner.advance(10)
            outer.advance(4)
            assert len(prog._live.tasks) == 1
    assert prog._live is None and not prog._open
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["inner 10/10", "outer 4/4"]
