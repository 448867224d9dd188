"""The public coins of ``coin=public`` encoders (:mod:`sstq_fl.encoders.seeded`): the same draws, on the same named
streams, for every encoder that derives its indices or its candidate seed from them."""

import numpy as np
import pytest
import torch

from sstq_fl import rng
from sstq_fl.encoders import make_encoder
from sstq_fl.encoders.seeded import public_coins, public_seeds, sampled_indices

COINS = np.arange(100, 106)


@pytest.mark.parametrize("spec", ["sqkr:coin=public", "sqkr:coin=private", "randk:coin=public,k=5", "randk:k=5"])
def test_index_sampling_encoders_draw_their_indices_on_their_own_streams(spec):
    enc = make_encoder(spec, 40, 2.0)
    size = getattr(enc, "N", enc.dim)
    public = enc.cfg["coin"] == "public"
    seeds = rng.as_seeds(COINS if public else np.arange(6))
    want = rng.sample_without_replacement(seeds, f"{enc.name}-{'public-' if public else ''}index", enc.k, size)
    got = enc._indices(None if public else seeds, COINS if public else None, 6)
    assert torch.equal(got, torch.from_numpy(want))


def test_public_seeds_mix_the_public_coins_with_the_run_seed_and_one_coin_serves_every_message():
    enc = make_encoder("privunit-mrc:coin=public,bits=8", 40, 2.0)
    want = rng.raw_bits(rng.as_seeds(COINS), f"privunit-mrc-public-{enc.seed}", 1)[:, 0]
    assert np.array_equal(public_seeds(enc, None, COINS, 6), want)
    assert np.array_equal(public_coins(enc, np.array([7]), 3), np.full(3, 7, np.uint64))
    assert np.array_equal(sampled_indices(make_encoder("sqkr:coin=public", 40, 2.0), None, 7, 2, 3, 64)[0],
                          sampled_indices(make_encoder("sqkr:coin=public", 40, 2.0), None, [7, 7], 2, 3, 64)[1])


@pytest.mark.parametrize("spec", ["sqkr:coin=public", "randk:coin=public", "privunit-mrc:coin=public,bits=8"])
def test_coin_public_without_coins_is_a_one_line_error(spec):
    enc = make_encoder(spec, 40, 2.0)
    with pytest.raises(ValueError, match=f"^{enc.name} with coin=public needs the public per-client coins$"):
        enc.encode(torch.ones(2, 40), np.arange(2))
