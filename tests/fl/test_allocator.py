"""The allocator thresholds (:mod:`sstq_fl.fl.allocator`): set once on glibc, left alone when turned off."""

import os
import platform
import subprocess
import sys

import pytest


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_the_thresholds_are_set_once_and_can_be_turned_off():
    code = "from sstq_fl.fl.allocator import tune_allocator as t; print(t(), t())"
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "SSTQ_FL_MALLOC_TUNING": "0"}).stdout.split()
    assert on == ["True", "True"] and off == ["False", "False"]
