"""Session VM: one qemu (TCG) node with its own kernel, booted once, always stopped.

For tests that must not touch the host's kernel: swap on/off, sysctls, the
watchdog, reboots and kernel crashes. The image is built once and cached
(tests.vm.harness.ensure_image); each session boots a throw-away copy of it.
Under TCG a boot takes about a minute, so tests share this one VM; a test that
leaves the VM changed (swap off, a sysctl) should put it back.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from tests.conftest import require_root_and_tools
from tests.vm import harness as vm


def _require_vm_tools() -> None:
    require_root_and_tools("VM tests (debootstrap, chroot, mke2fs -d, qemu)", vm.missing_tools())


@pytest.fixture(scope="session")
def vm_image():
    _require_vm_tools()
    return vm.ensure_image("bookworm", kernel="cloud", log=lambda *_: None)


@contextmanager
def booted(image, run_dir, **options):
    """A VM booted from ``image``, inventory written, always stopped and its disks removed."""
    node = vm.VM(image, run_dir, **options)
    try:
        node.start()
        node.wait_for_ssh(timeout=400)
        node.write_inventory()
        yield node
    finally:
        node.stop()
        assert not node.alive(), "qemu is still running after stop()"
        node.remove_disks()


@pytest.fixture(scope="session")
def vm_node(vm_image, tmp_path_factory):
    """A booted VM (tests.vm.harness.VM) with its inventory written to vm_node.inventory_dir."""
    with booted(vm_image, tmp_path_factory.mktemp("vm-node")) as node:
        yield node


@pytest.fixture(scope="module")
def hardware_watchdog_node(tmp_path_factory):
    """A second VM, for one module only: the generic kernel and qemu's i6300esb watchdog device.

    The cloud kernel (vm_node) has no i6300esb driver; this one takes a cold image
    build of about 150 s once per cache, and is stopped when its module ends.
    """
    _require_vm_tools()
    image = vm.ensure_image("bookworm", kernel="generic", log=lambda *_: None)
    with booted(image, tmp_path_factory.mktemp("vm-hw"), name="vm-hw", watchdog=True) as node:
        yield node


@pytest.fixture(autouse=True)
def _vm_left_usable(request):
    """After each test that used the VM: if it no longer answers, boot a fresh copy.

    The test that wedged it (a fill that thrashed, a hung unit) has already failed on
    its own; without this, every later VM test would fail too and hide what broke.
    """
    name = next((n for n in ("vm_node", "hardware_watchdog_node") if n in request.fixturenames), None)
    if name is None:
        yield
        return
    node = request.getfixturevalue(name)
    yield
    if not node.responsive(patience=90):
        request.node.add_report_section("teardown", "vm", f"{node.name} stopped answering: booted a fresh copy")
        node.restart_fresh()
