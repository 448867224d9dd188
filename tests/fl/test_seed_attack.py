"""The attack that motivates ``randomness=secure``: a server that holds the run seed, the config
and the wire bytes tries to tell ``x`` from ``−x``.

Every client of a round holds ``x_i = ±v`` (a fair secret bit each); its message goes through the
engine's own client path (:meth:`Trainer.client_messages`: coins, encoding, wire bytes).  The
adversary re-encodes ``+v`` and ``−v`` with the coins it can derive from the seed and says "+v"
when the bytes match the ``+v`` candidate only ("−v" symmetrically), else guesses by a coin flip.

Two measures, as in privacy auditing (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021):

* an **ε lower bound**: for the rejection set ``S`` = "says +v", pure ε-DP requires
  ``P[S | +v] ≤ e^ε P[S | −v]``; with Clopper–Pearson bounds (α = 1e-3 each side),
  ``ε_lb = log(lower P[S|+v] / upper P[S|−v])`` (both directions, the larger kept);
* the **accuracy**, which for a fair prior cannot exceed ``e^ε/(1+e^ε)`` under ε-DP.

``reproducible``: the coins are a function of the seed, so ``ε_lb`` exceeds the claimed ε (the
guarantee is void against the seed holder; this proves the test can fail).  ``secure``: the coins
come from keys the clients drew from the OS CSPRNG; ``ε_lb`` must not exceed ε and the accuracy
must stay within the bound (one-sided, 4 standard errors).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from sstq_fl import wire
from sstq_fl.encoders import registry
from sstq_fl.fl.engine import RunConfig, Trainer
from sstq_fl.fl.round_draws import encoder_seeds

N = 3000  # messages per (encoder, mode)
T = 3  # the round attacked
ALPHA = 1e-3


def _private_builtins() -> list[str]:
    return sorted(n for n, c in registry().items() if c.private and c.__module__.startswith("sstq_fl."))


def _epsilon_lower_bound(says: np.ndarray, bits: np.ndarray) -> float:
    """``max`` over both rejection sets of ``log(CP-lower P[S|b] / CP-upper P[S|1−b])``."""
    best = 0.0
    for b in (0, 1):
        k1, n1 = int(np.sum(says[bits == b] == b)), int(np.sum(bits == b))
        k0, n0 = int(np.sum(says[bits != b] == b)), int(np.sum(bits != b))
        lo = stats.beta.ppf(ALPHA, k1, n1 - k1 + 1) if k1 else 0.0
        hi = stats.beta.ppf(1 - ALPHA, k0 + 1, n0 - k0) if k0 < n0 else 1.0
        if lo > 0:
            best = max(best, math.log(lo / hi))
    return best


def _attack(encoder: str, epsilon: float, randomness: str) -> dict[str, float]:
    """The attack on ``N`` clients of one round: accuracy, ε lower bound and the accuracy bound."""
    cfg = RunConfig(task="lsq", dim=16, n=N, clients=N, batch=1, clip=1.0, epsilon=epsilon, encoder=encoder,
                    rounds=1, randomness=randomness)
    tr = Trainer(cfg)
    gen = np.random.default_rng(7)  # the attack's own randomness (secret bits, tie-breaks)
    v = torch.from_numpy(gen.normal(size=tr.task.dim))
    v = 0.8 * v / torch.linalg.vector_norm(v)
    bits = gen.integers(0, 2, N)
    x = torch.from_numpy(1.0 - 2.0 * bits)[:, None] * v[None, :]
    tr.task.client_grads = lambda theta, xb, yb: x.clone()  # type: ignore[method-assign]
    ids = np.arange(N)
    blobs, _ = tr.client_messages(tr.task.init_params(0), T, ids)  # what the server receives
    # the adversary: the recorded seed and config, the public encoder, the wire bytes
    guess_seeds = encoder_seeds(cfg.seed, T, ids)
    enc = tr.enc.for_round(T)  # the round's public frame
    plus = wire.pack(enc, enc.encode(v.expand(N, -1), guess_seeds), round=T)
    minus = wire.pack(enc, enc.encode(-v.expand(N, -1), guess_seeds), round=T)
    m0 = np.array([b == p for b, p in zip(blobs, plus)])
    m1 = np.array([b == m for b, m in zip(blobs, minus)])
    says = np.where(m0 & ~m1, 0, np.where(m1 & ~m0, 1, -1))
    guess = np.where(says >= 0, says, gen.integers(0, 2, N))
    return {"accuracy": float(np.mean(guess == bits)), "epsilon_lb": _epsilon_lower_bound(says, bits),
            "accuracy_bound": math.exp(epsilon) / (1 + math.exp(epsilon))}


CASES = [(e, 1.0) for e in _private_builtins()] + [("sstq-flat:b=4", 3.0)]


@pytest.mark.parametrize("encoder,epsilon", CASES)
def test_the_seed_holder_breaks_reproducible_mode_but_not_secure_mode(encoder, epsilon):
    rep = _attack(encoder, epsilon, "reproducible")
    assert rep["epsilon_lb"] > epsilon, (encoder, rep)  # the attack works: the guarantee is void
    sec = _attack(encoder, epsilon, "secure")
    se = math.sqrt(sec["accuracy_bound"] * (1 - sec["accuracy_bound"]) / N)
    assert sec["epsilon_lb"] <= epsilon and sec["accuracy"] <= sec["accuracy_bound"] + 4 * se, (encoder, sec)
    print(f"\n{encoder} eps={epsilon}: reproducible {rep}, secure {sec}")


def test_secure_messages_are_fresh_and_reproducible_ones_repeat():
    cfg = dict(task="lsq", dim=16, n=200, clients=20, batch=5, clip=1.0, encoder="sstq-flat:b=4", rounds=1)
    for mode, same in (("reproducible", True), ("secure", False)):
        tr = Trainer(RunConfig(**cfg, randomness=mode))
        theta = tr.task.init_params(0)
        a, b = (tr.client_messages(theta, 1, np.arange(20))[0] for _ in range(2))
        assert (a == b) is same, mode
