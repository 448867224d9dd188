"""A client's message depends only on its own input and seed, never on the batch around it."""

import numpy as np
import pytest
import torch

from sstq_fl.encoders import make_encoder

from ..conftest import unit_rows


@pytest.mark.parametrize("spec", ["clean", "vqsgd", "sqkr", "sqkr:coin=public", "privunit", "privunit-mrc",
                                  "privunit-mrc:coin=public", "sstq-flat",
                                  "sstq-flat:codebook=optimized", "sstq-ma", "sstq-flat:kashin=ap,iters=50"])
def test_batch_equals_one_at_a_time(spec):
    d = 3000
    enc = make_encoder(spec, d, 3.0, radius=1.0)
    x = unit_rows(9, d, seed=2).float()
    x[3] *= 0.01  # mixed norms and a frame row: rows converge after different numbers of passes
    if hasattr(enc, "frame"):
        x[5] = enc.frame.rows(torch.tensor([17]))[0].float() * 40
    seeds = np.array([11, 3, 99, 5, 0, 7, 123456789, 8, 2**40])
    batch = enc.encode(x, seeds, coins=seeds + 1)
    perm = np.random.default_rng(0).permutation(9)
    shuffled = enc.encode(x[perm], seeds[perm], coins=seeds[perm] + 1)
    for i in range(9):
        one = enc.encode(x[i : i + 1], seeds[i : i + 1], coins=seeds[i : i + 1] + 1)
        j = int(np.nonzero(perm == i)[0][0])
        for k, v in batch.fields.items():
            assert torch.equal(one.fields[k][0], v[i]), (spec, k, i)
            assert torch.equal(shuffled.fields[k][j], v[i]), (spec, k, i)


def test_same_seed_same_message_different_seed_different_message():
    enc = make_encoder("sstq-flat", 500, 3.0)
    x = unit_rows(1, 500).float().repeat(200, 1)
    a = enc.encode(x, np.arange(200))
    b = enc.encode(x, np.arange(200))
    assert torch.equal(a.fields["J"], b.fields["J"]) and torch.equal(a.fields["Z"], b.fields["Z"])
    assert len(set(a.fields["J"][:, 0].tolist())) > 150
