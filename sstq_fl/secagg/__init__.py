"""Secure aggregation with distributed discrete noise: the DDGauss and Skellam codecs and their accounting.

:mod:`.codec` encodes each client's vector into ``Z_m`` (clip, randomized Hadamard rotation, scaling,
conditional randomized rounding, local discrete noise) and decodes the modular sum; :mod:`.accounting`
gives the central ``(ε, δ)`` of the noisy sum over rounds and calibrates the local noise; :mod:`.samplers`
draws the discrete Gaussian and Skellam noise.  Kairouz, Liu & Steinke (ICML 2021) and Agarwal, Kairouz &
Liu (NeurIPS 2021).  Only numpy is needed: nothing here imports torch, flwr or ray.
"""

from .accounting import calibrate, central_epsilon, expected_mse, round_event
from .codec import NOISES, SecAggCodec, make_codec
from .samplers import discrete_gaussian, skellam

__all__ = [
    "NOISES", "SecAggCodec", "calibrate", "central_epsilon", "discrete_gaussian", "expected_mse", "make_codec",
    "round_event", "skellam",
]
