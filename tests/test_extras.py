"""The core installs without the extras (``pyproject.toml``): importing every ``sstq_fl`` module loads neither
Ray (``[simulation]``) nor Opacus (``[opacus]``), and each path that needs one refuses in one line, naming the
extra, where it is missing."""

import subprocess
import sys
import threading

import pytest
import torch
from torch.utils.data import TensorDataset

from sstq_fl.checks import require
from sstq_fl.experiments.runner import RayExecutor
from sstq_fl.privacy.dpsgd import DPSGD
from sstq_fl.privacy.ledger import PrivacyLedger

IMPORT_ALL = """
import importlib, pkgutil, sys, sstq_fl
names = [m.name for m in pkgutil.walk_packages(sstq_fl.__path__, "sstq_fl.")]
for name in names:
    importlib.import_module(name)
print(len(names), " ".join(m for m in ("flwr", "torch", "ray", "opacus") if m in sys.modules))
"""


def test_importing_every_module_of_the_package_loads_neither_ray_nor_opacus():
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, timeout=300, check=True)
    count, *loaded = out.stdout.split()
    assert int(count) > 100 and loaded == ["flwr", "torch"], out.stdout


@pytest.fixture
def missing(monkeypatch):
    """``missing(name)``: the module is not installed, as far as ``import`` and ``find_spec`` can tell."""
    return lambda name: monkeypatch.setitem(sys.modules, name, None)


def test_require_names_the_extra_of_a_missing_module(missing):
    require("ray", "x")  # installed here: no refusal
    missing("ray")
    with pytest.raises(ValueError, match=r"^x needs Ray: pip install 'sstq-fl\[simulation\]'$"):
        require("ray", "x")


def test_the_flower_simulation_without_ray_refuses_before_starting(missing):
    from flwr.serverapp import ServerApp

    from sstq_fl.flower.simulation import simulate

    missing("ray")
    with pytest.raises(ValueError, match=r"^Flower's simulation engine \(--engine flower; .* needs Ray: pip install "
                                         r"'sstq-fl\[simulation\]'$"):
        simulate(ServerApp(), None, 2, {}, threading.Event())


def test_a_ray_sweep_without_ray_refuses_and_names_the_local_executor(missing):
    missing("ray")
    with pytest.raises(ValueError, match=r"^--executor ray \(--executor local runs without it\) needs Ray"):
        RayExecutor().run([], False, False, {}, lambda r: None)


def test_dpsgd_without_opacus_names_the_opacus_extra(missing):
    missing("opacus")
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match=r"^DPSGD needs Opacus: pip install 'sstq-fl\[opacus\]'$"):
        DPSGD(model, torch.optim.SGD(model.parameters(), lr=0.1), TensorDataset(torch.zeros(4, 2)), sample_rate=0.5,
              noise_multiplier=1.0, max_grad_norm=1.0, ledger=PrivacyLedger())
