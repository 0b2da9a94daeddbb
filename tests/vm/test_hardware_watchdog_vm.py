"""Role recovery on a node with a hardware watchdog (qemu's i6300esb, generic kernel).

The role must use /dev/watchdog as it is, load no softdog, and the device (not a
kernel timer) must reset a node whose userspace is stalled. Unlike softdog, this
path also covers a hard kernel lockup, which is why the role prefers it.
"""

from __future__ import annotations

import pytest

from sparkguard.roles.recovery.state import BOOT_TEXTFILE
from tests.vm import applying
from tests.vm.watchdog import RUNTIME_SHOWN, WATCHDOG_VARS, stall_and_wait_for_reboot, watchdog_state

# Its own VM (module fixture): a group of its own in dev.sh's first phase (tests/node_groups.py).
pytestmark = pytest.mark.vm


def test_hardware_watchdog_is_used_and_resets_a_stalled_node(hardware_watchdog_node, tmp_path):
    node = hardware_watchdog_node
    assert node.check("cat /sys/class/watchdog/watchdog0/identity").strip() == "i6300ESB timer"
    applying.converge(node, tmp_path / "recovery", f"    recovery: {{{WATCHDOG_VARS}}}\n", {"base", "recovery"})
    assert watchdog_state(node) == [RUNTIME_SHOWN, "0", "0", "dev"], "hardware watchdog armed, no softdog"

    seconds, console = stall_and_wait_for_reboot(node)
    print(f"userspace stall -> i6300esb reset -> SSH from a new boot after {seconds:.0f} s (TCG)")
    assert "softdog" not in console
    assert "sparkguard_previous_boot_unclean 1" in node.check(f"cat {BOOT_TEXTFILE}")
    assert watchdog_state(node) == [RUNTIME_SHOWN, "0", "0", "dev"], "armed again after the reset"
