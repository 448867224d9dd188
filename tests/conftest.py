import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see sstq_fl/__init__.py
import tempfile  # noqa: E402

# decoded data sets go to a cache of this test session, never the user's (sstq_fl.data.cache)
os.environ.setdefault("SSTQ_FL_CACHE", tempfile.mkdtemp(prefix="sstq-fl-test-cache-"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

# two xdist workers on two cores (scripts/test.sh): one thread each, not two workers of two threads each
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)


@pytest.fixture
def rs() -> np.random.Generator:
    return np.random.default_rng(1234)


def unit_rows(n: int, d: int, seed: int = 0, norm: float = 1.0) -> torch.Tensor:
    g = torch.from_numpy(np.random.default_rng(seed).standard_normal((n, d)))
    return g / torch.linalg.vector_norm(g, dim=1, keepdim=True) * norm


@pytest.fixture
def run_identity(monkeypatch):
    """Messages created outside a Flower process need a run id (Flower sets it in the ServerApp)."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)



@pytest.fixture
def flower_log():
    """The messages Flower's ``flwr`` logger emits during the test (its own handlers bypass caplog)."""
    import logging

    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    flower = logging.getLogger("flwr")
    flower.addHandler(handler)
    yield seen
    flower.removeHandler(handler)


RAY_TESTS = (
    "tests/examples/", "tests/experiments/test_sweep.py", "tests/flower/test_simulation.py", "tests/flower/test_inputs.py",
    "tests/flower/test_logs.py", "tests/flower/test_flwr_run.py", "tests/flower/test_cohort.py", "tests/flower/test_plumbing.py",
    "tests/flower/test_client_ledger_simulation.py", "tests/test_cli_inputs.py", "tests/flower/test_run_tracking.py",
    "tests/flower/test_secagg.py",
)
"""Modules whose tests start Ray (Flower's simulation runtime, ``flwr run``, Ray sweeps); in the generative
pipelines' modules, the tests named ``*flower*``.  Under ``pytest -n 2 --dist loadgroup`` (scripts/test.sh) they run
one after another on one worker, so no two Ray clusters compete for the two cores under the runs' round timeouts (a
``ray start --head`` of a test writes its address under its own ``--temp-dir``, where no other ``ray.init()`` looks).
``tests/deployment/`` (real SuperLink/SuperNode processes, no Ray) is a group of its own, so it runs beside them on
the other worker."""


def xdist_group(nodeid: str) -> str | None:
    """The xdist group of a test: ``"deployment"``, ``"ray"`` or none (:data:`RAY_TESTS`)."""
    if nodeid.startswith("tests/deployment/"):
        return "deployment"
    if nodeid.startswith(RAY_TESTS) or (nodeid.startswith("tests/gen/") and "flower" in nodeid.split("::", 1)[-1]):
        return "ray"
    return None


def pytest_collection_modifyitems(config, items):
    """Put the tests that start Ray or Flower processes in their xdist groups (a no-op without pytest-xdist)."""
    for item in items:
        group = xdist_group(item.nodeid)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
