"""Smoke tests for the VM harness: own kernel, swap at boot, reboot and crash recovery.

Ordered on purpose: the reboot and crash tests run last on the shared VM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparkguard.inventory.loader import load_inventory
from tests.vm import harness as vm

pytestmark = pytest.mark.vm


def test_qemu_command_is_loopback_only_and_reboots_in_place(vm_image, tmp_path):
    node = vm.VM(vm_image, tmp_path)
    node.port = 2222
    command = node.qemu_command()
    assert "-no-reboot" not in command and "-no-shutdown" not in command
    assert "user,id=n0,hostfwd=tcp:127.0.0.1:2222-:22" in command
    assert "i6300esb" not in " ".join(command)  # the watchdog device is opt-in
    assert "panic=5" in command[command.index("-append") + 1]


def test_watchdog_device_needs_the_generic_kernel(vm_image, tmp_path):
    with pytest.raises(vm.VMError, match="generic"):
        vm.VM(vm_image, tmp_path, watchdog=True).start()
    assert not (tmp_path / "root.img").exists()


def test_ssh_as_root_and_ops(vm_node):
    assert vm_node.ssh("id -un") == (0, "root\n", "")
    rc, out, _ = vm_node.ssh("sudo -n id -un", user="ops")
    assert (rc, out) == (0, "root\n")
    assert vm_node.check("hostname").strip() == vm.HOSTNAME


def test_swap_partition_is_on_at_boot(vm_node):
    out = vm_node.check("swapon --show=NAME,TYPE,SIZE --noheadings --bytes")
    assert out.split()[:2] == ["/dev/vdb", "partition"], out
    assert int(out.split()[2]) > 200 * 2**20
    assert vm_node.check(f"blkid -L {vm.SWAP_LABEL}").strip() == "/dev/vdb"


def test_kernel_is_the_vms_own(vm_node):
    assert vm_node.check("uname -r").strip() == vm_node.image.meta["kernel"]
    assert vm_node.check("uname -r").strip() != os.uname().release
    host_swappiness = Path("/proc/sys/vm/swappiness").read_text()
    assert vm_node.check("sysctl -w vm.swappiness=33 && cat /proc/sys/vm/swappiness").strip().endswith("33")
    vm_node.check("sysctl -q -w vm.swappiness=60")
    assert Path("/proc/sys/vm/swappiness").read_text() == host_swappiness


def test_inventory_validates_and_pyinfra_connects(vm_node):
    inventory = load_inventory(vm_node.inventory_dir)
    host = inventory.host(vm_node.name)
    assert host.config.ssh_port == vm_node.port
    assert host.config.node.memory_total_gib == vm_node.memory_total_gib
    assert 1.0 < vm_node.memory_total_gib < 1.5  # -m 1536 less what the kernel reserves
    result = subprocess.run(
        [str(Path(sys.executable).parent / "pyinfra"), "-y", str(vm_node.inventory_dir / "inventory.py"),
         "exec", "--", "cat /proc/sys/kernel/random/boot_id"],
        capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_reboot_changes_boot_id_and_keeps_swap(vm_node):
    before = vm_node.boot_id()
    vm_node.reboot(timeout=300)
    assert vm_node.boot_id() != before
    assert "/dev/vdb" in vm_node.check("swapon --show=NAME --noheadings")
    assert vm_node.alive()


def test_kernel_crash_comes_back_by_itself(vm_node):
    before = vm_node.boot_id()
    vm_node.crash(timeout=300)
    assert vm_node.boot_id() != before
    # The harness boots with panic=5 so a crash always comes back; tests that run before this one
    # may have put their own kernel.panic in sysctl.d (role recovery), so check the command line.
    assert "panic=5" in vm_node.check("cat /proc/cmdline").split()
    assert "Kernel panic" in vm_node.console_log.read_text(errors="replace")


def test_a_wedged_vm_is_noticed_and_replaced_by_a_fresh_copy(vm_node):
    """What tests/vm/conftest.py relies on to keep one failed test from failing the rest."""
    vm_node.check("touch /root/left-by-an-earlier-test")
    before = vm_node.boot_id()
    os.kill(vm_node.process.pid, signal.SIGSTOP)  # the guest stops answering, as a thrashing one does
    try:
        assert not vm_node.responsive(patience=5)
    finally:
        os.kill(vm_node.process.pid, signal.SIGCONT)
    vm_node.restart_fresh()
    assert vm_node.responsive(patience=30)
    assert vm_node.boot_id() != before
    assert vm_node.ssh("test -e /root/left-by-an-earlier-test")[0] == 1, "a fresh copy, not the old disk"
    inventory = load_inventory(vm_node.inventory_dir)
    assert inventory.host(vm_node.name).config.ssh_port == vm_node.port
