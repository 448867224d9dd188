"""The ``serverapp`` component of ``flwr run .`` from a clone: sstq-fl's ServerApp.

The app itself is :mod:`sstq_fl.flower.apps.sstq_server` (installed with the package); this module only
names it, so the repository is a Flower app project as Flower lays one out.
"""

from sstq_fl.flower.apps.sstq_server import app

__all__ = ["app"]
