"""Polling with a deadline, shared by the sandbox, VM and tool tests."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 20.0, what: str = "", every: float = 0.3):
    """Poll until ``predicate()`` is truthy and return it; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
