"""Importing this module registers the built-in encoders."""

from . import clean, privunit, privunit_mrc, sqkr, sstq, vqsgd  # noqa: F401
