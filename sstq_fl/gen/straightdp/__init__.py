"""StraightDP (generative-pipelines spec §3): a DP moment release, the analytic flow field of the released
Gaussian mixture, and DP-SGD flow matching on simulated clients, on one add/remove ledger."""
