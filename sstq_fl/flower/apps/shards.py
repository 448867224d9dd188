"""A node's task and shards, built once per actor process and run config (both client handlers use them)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sstq_fl.fl.engine import ClientData


@lru_cache(maxsize=2)
def client_data(cfg_json: str) -> ClientData:
    """The task and the shards (no encoder, no ledger), once per actor process and config."""
    import torch

    from sstq_fl.config.train import RunConfig
    from sstq_fl.fl.engine import ClientData

    torch.set_num_threads(1)
    return ClientData(RunConfig(**json.loads(cfg_json)))
