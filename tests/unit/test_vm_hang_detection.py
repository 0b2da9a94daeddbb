"""The VM harness tells a guest kernel that hung from a slow TCG boot, from the console's own lines.

The lines are recorded from the incident VM of 2026-12-07 (both vCPUs stuck in nf_conntrack's hash, lockups
from 45 s to 421 s) and from slow boots after a reboot (20-27 s lockups that pass). ``booted`` sets a VM up
once more on a fresh copy only on the first kind.
"""

from __future__ import annotations

import pytest

from tests.vm import harness as vm

HUNG = """[    0.000000] Linux version 6.1.0-50-cloud-amd64
[   54.727411] rcu: INFO: rcu_preempt self-detected stall on CPU
[   80.928936] watchdog: BUG: soft lockup - CPU#0 stuck for 45s! [prometheus:280]
[   81.041765] watchdog: BUG: soft lockup - CPU#1 stuck for 45s! [sshd:402]
[  108.930341] watchdog: BUG: soft lockup - CPU#0 stuck for 71s! [prometheus:280]
[  109.040841] watchdog: BUG: soft lockup - CPU#1 stuck for 71s! [sshd:402]
"""
SLOW = """[    0.000000] Linux version 6.1.0-50-cloud-amd64
[   41.112233] watchdog: BUG: soft lockup - CPU#1 stuck for 27s! [systemd-udevd:190]
[   60.000001] systemd[1]: Reached target multi-user.target - Multi-User System.
"""


@pytest.mark.parametrize("console,expected", [
    (HUNG, "soft lockup - CPU#0 stuck for 71s! [prometheus:280]"),
    (SLOW, None),
    ("", None),
])
def test_a_hung_guest_kernel_is_told_from_a_slow_boot(tmp_path, console, expected):
    node = vm.VM.__new__(vm.VM)          # only its run directory is read
    node.run_dir = tmp_path
    (tmp_path / "console.log").write_text(console)
    assert node.kernel_hung() == expected


def test_booted_sets_up_once_more_on_a_fresh_copy_only_when_the_kernel_hung(tmp_path, monkeypatch):
    from tests.vm import conftest

    class FakeVM:
        def __init__(self, console: str):
            self.console_log, self.starts, self.setups, self.timings = tmp_path / "console.log", 0, 0, {}
            self.console, self.name = console, "vm-test"

        def start(self):
            self.starts += 1
            self.console_log.write_text(self.console if self.starts == 1 else SLOW)

        def wait_for_ssh(self, timeout):
            pass

        def write_inventory(self):
            pass

        def kernel_hung(self):
            return vm.VM.kernel_hung(self)

        def restart_fresh(self):
            self.start()

    def flaky_setup(node):
        node.setups += 1
        if node.starts == 1:
            raise TimeoutError("Timeout opening channel.")

    said: list[str] = []
    monkeypatch.setattr(conftest, "report", said.append)
    hung = FakeVM(HUNG)
    hung.start()
    conftest._ready(hung, flaky_setup)
    assert (hung.starts, hung.setups) == (2, 2)                     # a fresh copy, set up once more
    assert (tmp_path / "console-hung.log").read_text() == HUNG      # the hang's console kept
    assert len(said) == 1 and "stuck for 71s" in said[0] and "fresh copy" in said[0]   # and the run says so
    slow = FakeVM(SLOW)
    slow.start()
    with pytest.raises(TimeoutError):                                # no hang on the console: fails as it is
        conftest._ready(slow, flaky_setup)
    assert (slow.starts, slow.setups) == (1, 1)
