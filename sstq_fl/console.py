"""The end of an ``sstq-fl`` process: what an exit does that matters, without the interpreter's teardown.

Python's teardown frees every loaded module's objects, one by one: once torch is loaded that is a large
share of a short command's time (``benchmarks/results/cli_startup.json``), a cost of every command that
produces nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn


def run_and_exit(main: Callable[[], int]) -> NoReturn:
    """Run ``main`` and end the process with its status (argparse's for ``--help`` and usage errors).

    In order, as an interpreter exit: running non-daemon threads are joined, the exit handlers run
    (logging's flush, Ray's shutdown, temporary folders' removal) and the standard streams are
    flushed; then :func:`os._exit`."""
    try:
        rc = main()
    except SystemExit as exc:  # argparse: --help (0), a usage error (2)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        rc = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    shutdown = getattr(threading, "_shutdown", None)  # CPython: wakes idle executor workers, joins until none is left
    if shutdown is not None:
        shutdown()
    else:  # pragma: no cover - other interpreters
        while others := [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]:
            others[0].join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # the reader went away: main's status for it
            rc = rc or 141
        except (OSError, ValueError) as exc:  # a full disk, a closed stream: the output is incomplete
            with contextlib.suppress(OSError, ValueError):
                print(f"sstq-fl: error: writing the output failed: {exc}", file=sys.__stderr__)
            rc = rc or 120
    os._exit(rc)


def print_json(obj: Any) -> None:
    """Print ``obj`` as standard JSON (a non-finite number is ``null``: a null ε means ε = ∞)."""

    from .io import finite_json

    print(json.dumps(finite_json(obj), indent=2, allow_nan=False))
