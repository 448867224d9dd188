import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from sstq_fl.privacy.dpsgd import DPSGD
from sstq_fl.privacy.errors import Budget, PlanExceededError
from sstq_fl.privacy.events import GaussianEvent, PoissonSampledEvent
from sstq_fl.privacy.ledger import PrivacyLedger


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 6, generator=g)
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0).long()


def loss_fn(model, batch):
    return nn.functional.cross_entropy(model(batch[0]), batch[1], reduction="sum")


@pytest.mark.parametrize("relation", ["add_or_remove_one", "replace_one"])
def test_steps_charged_to_the_ledger_and_training_works(relation):
    x, y = data()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    led = PrivacyLedger(relation)
    tr = DPSGD(model, torch.optim.SGD(model.parameters(), lr=0.5), TensorDataset(x, y), sample_rate=0.1,
               noise_multiplier=1.0, max_grad_norm=1.0, ledger=led, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(5):
            tr.epoch(loss_fn)
    assert tr.steps == 50 and led.entries[0].count == 50
    assert led.entries[0].event == PoissonSampledEvent(0.1, GaussianEvent(1.0))
    ref = PrivacyLedger(relation)
    ref.record(PoissonSampledEvent(0.1, GaussianEvent(1.0)), 50)
    assert led.epsilon(1e-5) == ref.epsilon(1e-5)
    acc = (tr.model(x).argmax(1) == y).float().mean()
    assert acc > 0.85


def test_empty_poisson_batches_still_noisy_and_charged():
    x, y = data()
    model = nn.Linear(6, 2)
    led = PrivacyLedger("add_or_remove_one")
    tr = DPSGD(model, torch.optim.SGD(model.parameters(), lr=0.1), TensorDataset(x, y), sample_rate=0.001,
               noise_multiplier=2.0, max_grad_norm=1.0, ledger=led)
    before = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sizes = []
        for batch in tr.loader:
            sizes.append(len(batch[0]))
            tr.step(batch, loss_fn)
    assert sizes.count(0) > 100 and tr.steps == len(sizes)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # noise moved the weights


def test_unplanned_steps_are_refused():
    x, y = data()
    model = nn.Linear(6, 2)
    led = PrivacyLedger("add_or_remove_one")
    led.start([(PoissonSampledEvent(0.1, GaussianEvent(1.0)), 3)], Budget(10, 1e-5))
    tr = DPSGD(model, torch.optim.SGD(model.parameters(), lr=0.1), TensorDataset(x, y), sample_rate=0.1,
               noise_multiplier=1.0, max_grad_norm=1.0, ledger=led)
    batches = iter(tr.loader)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            tr.step(next(batches), loss_fn)
        with pytest.raises(PlanExceededError):
            tr.step(next(batches), loss_fn)


def test_per_example_gradients_are_each_records_own_before_clipping():
    """Opacus's per-example gradients (``grad_sample``) equal each record's own gradient: with the batch's
    losses summed, a ``loss_reduction="mean"`` wrapper scaled them by the batch size (the clip then acted as C/n)."""
    x, y = data()
    torch.manual_seed(0)
    model = nn.Linear(6, 2)
    own = []
    for i in range(8):
        model.zero_grad()
        loss_fn(model, (x[i:i + 1], y[i:i + 1])).backward()
        own.append(model.weight.grad.clone())
    tr = DPSGD(model, torch.optim.SGD(model.parameters(), lr=0.0), TensorDataset(x, y), sample_rate=0.1,
               noise_multiplier=1.0, max_grad_norm=1e9, ledger=PrivacyLedger("replace_one"))
    loss_fn(tr.model, (x[:8], y[:8])).backward()
    assert torch.allclose(model.weight.grad_sample, torch.stack(own), atol=1e-6)
