"""sstq-fl's own Flower apps, installed with the package (part of the Flower edge, :mod:`sstq_fl.flower`).

:mod:`.sstq_server` is the ServerApp (training, and the DP generative workloads through
:mod:`.gen_server`); :mod:`.sstq_client` the ClientApp (with :mod:`.gen_client`).  A clone's
``flwr run .`` names them through ``strategies/sstq_server.py`` and ``clients/sstq_client.py``;
the core reaches them only through the ``sstq_fl.backends`` entry points.
"""
