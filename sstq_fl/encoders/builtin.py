"""Importing this module registers the built-in encoders."""

from . import clean, privunit, sqkr, sstq, vqsgd  # noqa: F401
