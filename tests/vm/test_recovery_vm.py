"""Role recovery on a VM with its own kernel: watchdog armed, journal and sysctls survive a
reboot, and a kernel panic brings the node back by itself with an unclean-boot report."""

from __future__ import annotations

import uuid

import pytest

from sparkguard.roles.recovery.state import BOOT_TEXTFILE
from tests.vm import applying
from tests.vm.watchdog import RUNTIME_S, RUNTIME_SHOWN, WATCHDOG_VARS, stall_and_wait_for_reboot, watchdog_state

pytestmark = pytest.mark.vm
KEEP = {"base", "earlyoom", "swap", "recovery"}
RECOVERY = f"    recovery: {{sysctl: {{sysrq: 240, panic_reboot_s: 10, panic_on_oops: true}}, {WATCHDOG_VARS}}}\n"


@pytest.fixture(scope="module")
def recovered(vm_node, tmp_path_factory):
    return applying.converge(vm_node, tmp_path_factory.mktemp("recovery"), RECOVERY, KEEP)


def test_watchdog_armed_with_softdog(vm_node, recovered):
    assert watchdog_state(vm_node) == [RUNTIME_SHOWN, "1", "1", "dev"]


def test_journal_sysctls_and_watchdog_hold_after_reboot(vm_node, recovered):
    token = uuid.uuid4().hex
    vm_node.check(f"logger -t sparkguard-test 'before reboot {token}'; journalctl --sync")
    vm_node.reboot()
    assert token in vm_node.check("journalctl -b -1 -t sparkguard-test -o cat")
    values = vm_node.check("sysctl -n kernel.sysrq kernel.panic kernel.panic_on_oops vm.swappiness").split()
    assert values == ["240", "10", "1", "10"]
    assert watchdog_state(vm_node) == [RUNTIME_SHOWN, "1", "1", "dev"]
    assert "sparkguard_previous_boot_unclean 0" in vm_node.check(f"cat {BOOT_TEXTFILE}")


def test_kernel_panic_reboots_by_itself_and_the_next_boot_reports_it(vm_node, recovered):
    assert vm_node.check("sysctl -n kernel.panic").strip() == "10"  # the role's value, not the harness's
    old = vm_node.boot_id()
    vm_node.ssh("(sleep 1; echo c > /proc/sysrq-trigger) > /dev/null 2>&1 &", timeout=20)
    vm_node.wait_for_reboot(old, timeout=400)
    report = vm_node.check("journalctl -b -t sparkguard-boot-report -o cat")
    assert "previous boot ended uncleanly" in report
    assert "sparkguard_previous_boot_unclean 1" in vm_node.check(f"cat {BOOT_TEXTFILE}")



def test_userspace_stall_is_rebooted_by_the_watchdog(vm_node, recovered):
    """PID 1 starved of CPU: the softdog the role armed reboots the node, and the next boot reports it."""
    assert watchdog_state(vm_node) == [RUNTIME_SHOWN, "1", "1", "dev"]
    seconds, console = stall_and_wait_for_reboot(vm_node)
    print(f"userspace stall -> SSH answers from a new boot after {seconds:.0f} s (RuntimeWatchdogSec={RUNTIME_S}s, TCG)")
    assert "softdog: Initiating system reboot" in console, console[-2000:]
    assert "sparkguard_previous_boot_unclean 1" in vm_node.check(f"cat {BOOT_TEXTFILE}")
