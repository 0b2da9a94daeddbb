"""swap-toggle as shipped (roles/swap/files/swap-toggle.sh): its command line, run for real, read-only on this host.

Turning swap off and on needs the node's own kernel: tests/vm/test_swap_vm.py does that in qemu.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkguard.roles.swap.state import TOGGLE_SOURCE


def toggle(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(TOGGLE_SOURCE), *args], capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize("args", [
    (), ("bogus",), ("off", "--reserve-percent", "ten"), ("off", "--reserve-percent"), ("on", "--unknown", "x"),
    ("fstab-active", "--training-target"),
])
def test_a_wrong_command_line_is_refused_with_usage(args):
    result = toggle(*args)
    assert result.returncode == 2 and "usage: swap-toggle" in result.stderr, result


def test_none_active_tells_the_truth_about_this_host():
    active = len(Path("/proc/swaps").read_text().splitlines()) > 1
    assert toggle("none-active").returncode == (1 if active else 0)


def test_the_role_ships_the_file_as_it_is_and_passes_its_values():
    from sparkguard.engine.render import host_states
    from sparkguard.inventory.loader import load_inventory
    from tests.conftest import REPO

    states = host_states(load_inventory(REPO / "inventory" / "example").host("spark-01"))
    files = {f.path: f.content for state in states for f in state.files}
    assert files["/usr/local/lib/sparkguard/swap-toggle"] == TOGGLE_SOURCE.read_text()
    unit = files["/etc/systemd/system/sparkguard-swapoff.service"]
    assert "off --record /run/sparkguard/swap-before-training --reserve-percent 8" in unit
