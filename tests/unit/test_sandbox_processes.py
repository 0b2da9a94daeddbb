"""Which of a node's processes survived `sandbox down`: one process is a PID and its start time."""

from __future__ import annotations

import os
import subprocess

from sparkguard.dev import sandbox


def test_a_running_process_is_still_running_until_it_ends():
    child = subprocess.Popen(["sleep", "30"])
    try:
        processes = {child.pid: sandbox.start_time(child.pid)}
        assert processes[child.pid] is not None
        assert sandbox.still_running(processes) == [child.pid]
    finally:
        child.kill()
        child.wait(timeout=10)
    assert sandbox.still_running(processes) == []


def test_a_reused_pid_is_not_the_process_that_had_it():
    """What a busy host does with a freed PID: gives it to a new process, which started later."""
    me = os.getpid()
    started = sandbox.start_time(me)
    assert started is not None
    assert sandbox.still_running({me: started}) == [me]
    assert sandbox.still_running({me: started - 1}) == []
    assert sandbox.still_running({me: None}) == []  # it was gone already when it was listed
