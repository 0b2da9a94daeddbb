"""Role swap, offline: fstab round trip byte for byte, settings, desired state per mode."""

from __future__ import annotations

import pytest

from sparkguard.engine.render import host_states
from sparkguard.export.ansible.export import _edit
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.swap.fstab import MARKER, disable_swap_lines, enable_swap_lines

FSTAB = (
    "# /etc/fstab: static file system information.\n"
    "UUID=1234-abcd /               ext4    errors=remount-ro 0       1\n"
    "/swap.img\tnone\tswap\tsw\t0\t0\n"
    "# /old.swap none swap sw 0 0\n"
    "LABEL=sgswap  none  swap  sw,pri=5  0 0\n"
    "tmpfs /tmp tmpfs defaults 0 0"  # no trailing newline
)


def test_off_comments_out_only_live_swap_lines():
    off = disable_swap_lines(FSTAB)
    lines = off.splitlines()
    assert lines[2] == MARKER + "/swap.img\tnone\tswap\tsw\t0\t0"
    assert lines[3] == "# /old.swap none swap sw 0 0"
    assert lines[4].startswith(MARKER + "LABEL=sgswap")
    assert lines[1].startswith("UUID=") and lines[5].startswith("tmpfs")


def test_on_off_on_round_trips_byte_for_byte():
    assert enable_swap_lines(disable_swap_lines(FSTAB)) == FSTAB
    assert disable_swap_lines(disable_swap_lines(FSTAB)) == disable_swap_lines(FSTAB)
    assert enable_swap_lines(FSTAB) == FSTAB


@pytest.mark.parametrize("written,mode", [("off", "off"), ("'off'", "off"), ("on", "on"), ("training-off", "training-off")])
def test_yaml_booleans_mean_what_the_operator_wrote(inventory_dir, written, mode):
    path = inventory_dir(f"all:\n  vars:\n    node: {{memory_total_gib: 121.7}}\n    swap: {{mode: {written}}}\n"
                         f"  hosts:\n    h: {{ssh_host: 192.0.2.1}}\n")
    assert load_inventory(path).host("h").config.swap.mode == mode


def test_modes_differ_in_masks_and_fstab_edit(inventory_dir):
    def state(mode):
        path = inventory_dir(f"all:\n  vars:\n    node: {{memory_total_gib: 121.7}}\n    swap: {{mode: '{mode}'}}\n"
                             f"  hosts:\n    h: {{ssh_host: 192.0.2.1}}\n")
        return next(s for s in host_states(load_inventory(path).host("h")) if s.role == "swap")

    off, on = state("off"), state("on")
    assert {s.name: s.masked for s in off.services}["swap.target"] is True
    assert {s.name: s.masked for s in on.services}["swap.target"] is False
    assert off.edits[0].transform(FSTAB) == disable_swap_lines(FSTAB)
    assert on.edits[0].transform(disable_swap_lines(FSTAB)) == FSTAB
    assert "none-active" in off.ensures[0].check and "fstab-active" in on.ensures[0].check
    # fstab is systemd-fstab-generator's input: after either edit, apply and the Ansible export re-read units.
    assert off.edits[0].generator_input and on.edits[0].generator_input
    assert all(_edit(s, s.edits[0])["daemon_reload"] for s in (off, on))
