"""Flower server apps and strategies for sstq-fl."""
