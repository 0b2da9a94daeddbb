"""Session VM: one qemu (TCG) node with its own kernel, booted once, always stopped.

For tests that must not touch the host's kernel: swap on/off, sysctls, the
watchdog, reboots and kernel crashes. The image is built once and cached
(sparkguard.vm.ensure_image); each session boots a throw-away copy of it.
Under TCG a boot takes about a minute, so tests share this one VM; a test that
leaves the VM changed (swap off, a sysctl) should put it back.
"""

from __future__ import annotations


import pytest

from sparkguard import vm
from tests.conftest import require_root_and_tools


def _require_vm_tools() -> None:
    require_root_and_tools("VM tests (debootstrap, chroot, mke2fs -d, qemu)", vm.missing_tools())


@pytest.fixture(scope="session")
def vm_image():
    _require_vm_tools()
    return vm.ensure_image("bookworm", kernel="cloud", log=lambda *_: None)


@pytest.fixture(scope="session")
def vm_node(vm_image, tmp_path_factory):
    """A booted VM (sparkguard.vm.VM) with its inventory written to vm_node.inventory_dir."""
    node = vm.VM(vm_image, tmp_path_factory.mktemp("vm-node"))
    try:
        node.start()
        node.wait_for_ssh(timeout=300)
        node.write_inventory()
        yield node
    finally:
        node.stop()
        assert not node.alive(), "qemu is still running after stop()"
        node.remove_disks()


@pytest.fixture(autouse=True)
def _vm_left_usable(request):
    """After each test that used the VM: if it no longer answers, boot a fresh copy.

    The test that wedged it (a fill that thrashed, a hung unit) has already failed on
    its own; without this, every later VM test would fail too and hide what broke.
    """
    if "vm_node" not in request.fixturenames:
        yield
        return
    node = request.getfixturevalue("vm_node")
    yield
    if not node.responsive(patience=90):
        request.node.add_report_section("teardown", "vm", f"{node.name} stopped answering: booted a fresh copy")
        node.restart_fresh()
