"""Federated training with encoded gradients (the vectorized in-process engine)."""
