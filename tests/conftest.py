import os

from sstq_fl.process import ProcessOptions, apply_process_options

apply_process_options(ProcessOptions())  # the command line's process settings, before torch loads (sstq_fl.process)
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


def xdist_group(nodeid: str) -> str | None:
    """The xdist group of a test: ``"deployment"`` for ``tests/deployment/``, else none.

    Under ``pytest -n 2 --dist loadgroup`` (scripts/test.sh) a group's tests run one after another on one worker.
    ``tests/deployment/`` (real SuperLink/SuperNode processes under a round timeout) is one group, so that its two
    federations never run at once.  The tests that start Ray (Flower's simulation engine, ``flwr run``, Ray sweeps;
    most of them in ``tests/flower/``) are in none: each starts its own local cluster (``ray.init()``; a
    ``ray start --head`` of a test writes its address under its own ``--temp-dir``, where no other ``ray.init()``
    looks; ``flwr run`` gets a private ``FLWR_HOME`` and free ports), stops only its own processes, and runs under
    the default round timeout (600 s), so two of them on the two workers neither meet nor time out."""
    return "deployment" if nodeid.startswith("tests/deployment/") else None


def pytest_collection_modifyitems(config, items):
    """Put the tests that start Flower deployments in their xdist group (a no-op without pytest-xdist)."""
    for item in items:
        group = xdist_group(item.nodeid)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
