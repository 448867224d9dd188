"""DP-SGD with Opacus for the per-sample machinery, every step charged to *our* ledger.

Opacus computes per-example gradients (``GradSampleModule``), clips them to
``max_grad_norm``, adds ``N(0, σ² C²)`` noise and normalises by the expected batch size
(``DPOptimizer``); batches come from Poisson sampling (``DPDataLoader``, which can yield
empty batches: the step still adds noise and is still charged).  A step hook records one
``PoissonSampledEvent(q, GaussianEvent(σ))`` per noisy step in the
:class:`~sstq_fl.privacy.ledger.PrivacyLedger`; its ε is the ledger's, under the ledger's
neighbouring relation.  Opacus's own accountant (add/remove only) is never consulted.

Losses must be summed over the batch (``reduction='sum'``): the optimizer divides by the
expected batch size, so an empty batch contributes a zero gradient plus noise, not a NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..checks import require
from .events import GaussianEvent, PoissonSampledEvent
from .ledger import PrivacyLedger


class DPSGD:
    """Poisson-sampled DP-SGD over ``dataset`` for ``model`` with a recorded privacy cost."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, dataset: torch.utils.data.Dataset[Any], *,
                 sample_rate: float, noise_multiplier: float, max_grad_norm: float, ledger: PrivacyLedger,
                 seed: int = 0, subset: str = "private"):
        require("opacus", "DPSGD")
        from opacus import GradSampleModule
        from opacus.data_loader import DPDataLoader
        from opacus.optimizers import DPOptimizer

        n = len(dataset)  # type: ignore[arg-type]
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
        if not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be positive, got {max_grad_norm}")
        self.event = PoissonSampledEvent(sample_rate, GaussianEvent(noise_multiplier))
        self.ledger, self.subset = ledger, subset
        if isinstance(model, GradSampleModule) and model.loss_reduction != "sum":
            raise ValueError("DPSGD sums the losses: wrap the model with GradSampleModule(model, loss_reduction='sum')")
        # loss_reduction="sum": Opacus's default ("mean") scales each per-example gradient by the batch size
        # before clipping, so the clip acted as C/n (privacy intact, training hurt)
        self.model = model if isinstance(model, GradSampleModule) else GradSampleModule(model, loss_reduction="sum")
        self.loader = DPDataLoader(dataset, sample_rate=sample_rate, generator=torch.Generator().manual_seed(seed))
        self.optimizer = DPOptimizer(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                                     expected_batch_size=max(1, round(sample_rate * n)), loss_reduction="sum",
                                     generator=torch.Generator().manual_seed(seed + 1))
        self.optimizer.attach_step_hook(self._charge)
        self.steps = 0

    def _charge(self, _opt: object) -> None:
        self.ledger.record(self.event, 1, self.subset, "dp-sgd step")
        self.steps += 1

    def step(self, batch: Any, loss_fn: Callable[[nn.Module, Any], torch.Tensor]) -> float:
        """One noisy step on ``batch``; ``loss_fn(model, batch)`` returns the *summed* loss."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(self.model, batch)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def epoch(self, loss_fn: Callable[[nn.Module, Any], torch.Tensor]) -> list[float]:
        """One pass of the Poisson loader (``1/q`` steps in expectation-sized batches)."""
        return [self.step(batch, loss_fn) for batch in self.loader]
