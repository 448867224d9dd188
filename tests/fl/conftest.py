"""Fixtures shared by the Flower tests."""

import pytest


@pytest.fixture
def run_identity(monkeypatch):
    """Messages created outside a Flower process need a run id (Flower sets it in the ServerApp)."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)
