"""The ``clientapp`` component of ``flwr run .`` from a clone: sstq-fl's ClientApp.

The app itself is :mod:`sstq_fl.flower.apps.sstq_client` (installed with the package); this module only
names it, so the repository is a Flower app project as Flower lays one out.
"""

from sstq_fl.flower.apps.sstq_client import app

__all__ = ["app"]
