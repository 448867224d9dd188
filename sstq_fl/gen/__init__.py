"""DP generative pipelines: shared data loading and evaluation (generative-pipelines spec, section 1)."""
