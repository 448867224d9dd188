import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see sstq_fl/__init__.py

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)


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
