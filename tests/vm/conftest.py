"""Session VM: one qemu (TCG) node with its own kernel, booted once, always stopped.

For tests that must not touch the host's kernel: swap on/off, sysctls, the
watchdog, reboots and kernel crashes. The image is built once and cached
(tests.vm.harness.ensure_image); each session boots a throw-away copy of it.
Under TCG a boot takes about a minute, so tests share this one VM; a test that
leaves the VM changed (swap off, a sysctl) should put it back.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager

import pytest

from tests.conftest import require_root_and_tools
from tests.reporting import report
from tests.vm import harness as vm


def _require_vm_tools() -> None:
    require_root_and_tools("VM tests (debootstrap, chroot, mke2fs -d, qemu)", vm.missing_tools())


@pytest.fixture(scope="session")
def vm_image():
    _require_vm_tools()
    return vm.ensure_image("bookworm", kernel="cloud", log=lambda *_: None)


@contextmanager
def booted(image, run_dir, setup=None, **options):
    """A VM booted from ``image``, inventory written, ``setup(node)`` run, always stopped and its disks removed.

    If the boot or the setup fails while the guest kernel says it hung (a soft lockup of a minute or more on
    the console), the VM is booted again from a fresh copy of the image and set up once more, and the run's
    figures say so. Seen under TCG: both vCPUs of the incident VM stuck in nf_conntrack's hash from 35 s
    after boot, 420 s and counting (2026-12-07); the guest never came back, and nothing of sparkguard had
    run on it yet. A second failure, or any failure without such a line, fails as it is.
    """
    node = vm.VM(image, run_dir, **options)
    try:
        node.start()
        _ready(node, setup)
        yield node
    finally:
        node.stop()
        assert not node.alive(), "qemu is still running after stop()"
        node.remove_disks()


def _ready(node, setup) -> None:
    def attempt() -> None:
        node.wait_for_ssh(timeout=400)
        node.write_inventory()
        if setup is not None:
            setup(node)

    try:
        attempt()
    except Exception:
        hung = node.kernel_hung()
        if hung is None:
            raise
        kept = node.console_log.with_name("console-hung.log")
        shutil.copyfile(node.console_log, kept)
        report(f"{node.name}: the guest kernel hung while it was set up ({hung}; console kept in {kept}): "
               f"booted a fresh copy and set it up once more")
        node.restart_fresh()
        attempt()


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
