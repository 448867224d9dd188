import subprocess
import sys

import pytest

PRELUDE = ("import atexit, sys, threading, time\n"
           "from sstq_fl.console import run_and_exit\n"
           "atexit.register(lambda: print('exit handler ran', flush=False))\n")


def _run(body: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PRELUDE + body], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("body, rc", [("run_and_exit(lambda: 0)", 0), ("run_and_exit(lambda: 2)", 2),
                                      ("run_and_exit(lambda: sys.exit(0))", 0), ("run_and_exit(lambda: sys.exit())", 0),
                                      ("run_and_exit(lambda: sys.exit(2))", 2)])
def test_the_status_is_mains_and_the_exit_handlers_run(body, rc):
    out = _run(body)
    assert out.returncode == rc and out.stdout == "exit handler ran\n"


def test_a_message_exit_is_printed_with_status_1():
    out = _run("run_and_exit(lambda: sys.exit('no such thing'))")
    assert (out.returncode, out.stderr.strip()) == (1, "no such thing")


def test_buffered_output_and_running_threads_are_not_lost():
    """Everything written reaches a pipe (the stream is flushed), and a non-daemon thread finishes
    first, as at an interpreter exit."""
    out = _run("def late():\n    time.sleep(0.3)\n    print('thread done')\n"
               "def main():\n    threading.Thread(target=late).start()\n    print('x' * 100000, end='')\n    return 0\n"
               "run_and_exit(main)")
    assert out.returncode == 0
    assert out.stdout == "x" * 100000 + "thread done\nexit handler ran\n"


def test_the_console_script_ends_with_mains_status():
    ok = subprocess.run([sys.executable, "-m", "sstq_fl.cli", "encoders"], capture_output=True, text=True)
    assert ok.returncode == 0 and "sstq-flat" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "sstq_fl.cli", "run", "--clients", "0", "--out", "/nonexistent/x"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "clients" in bad.stderr
    usage = subprocess.run([sys.executable, "-m", "sstq_fl.cli", "no-such-command"], capture_output=True, text=True)
    assert usage.returncode == 2 and "invalid choice" in usage.stderr


def test_an_idle_executor_does_not_hang_the_exit():
    out = _run("from concurrent.futures import ThreadPoolExecutor\npool = ThreadPoolExecutor(2)\n"
               "def main():\n    pool.submit(print, 'task ran').result()\n    return 0\n"
               "run_and_exit(main)")
    assert out.returncode == 0 and out.stdout == "task ran\nexit handler ran\n"


def test_a_failed_final_write_is_an_error(tmp_path):
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-c", PRELUDE + "run_and_exit(lambda: print('x' * 10) or 0)"],
                             stdout=full, stderr=subprocess.PIPE, text=True, timeout=60,
                             env={k: v for k, v in __import__("os").environ.items() if k != "PYTHONUNBUFFERED"})
    assert out.returncode == 120 and "writing the output failed" in out.stderr
