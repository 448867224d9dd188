"""Tests of sstq_fl.config, the configuration room."""
