"""sstq-fl's own Flower apps, installed with the package (part of the Flower edge, :mod:`sstq_fl.flower`).

:mod:`.sstq_server` is the ServerApp (training, and the DP generative workloads through
:mod:`.gen_server`); :mod:`.sstq_client` the ClientApp (with :mod:`.gen_client`).  ``flwr run .`` names
them as its components (``pyproject.toml``'s ``[tool.flwr.app.components]``); the core reaches them only
through the ``sstq_fl.backends`` entry points.
"""
