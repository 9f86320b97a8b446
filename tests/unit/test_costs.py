"""The cost markers hold (tests/support/costs.py): a fast test cannot start a child process, whichever way it
tries, and a test marked for it can."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest


def test_a_fast_test_is_marked_fast_and_cannot_start_a_process(request):
    assert request.node.get_closest_marker("fast") is not None
    with pytest.raises(AssertionError, match="not marked for it: mark it @pytest.mark.process"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    with pytest.raises(AssertionError, match="not marked for it"):
        multiprocessing.get_context("spawn").Process(target=print).start()


@pytest.mark.process
def test_a_test_marked_process_may_start_one(request):
    assert request.node.get_closest_marker("fast") is None
    assert subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True,
                          check=True).stdout == "ran\n"

