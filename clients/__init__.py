"""Flower client apps (Flower stays at the edges: the mathematics lives in ``sstq_fl``)."""
