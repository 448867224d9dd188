"""sstq-fl: private, communication-efficient federated learning simulation."""

__version__ = "0.1.0"
