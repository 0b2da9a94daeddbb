"""boot-report as shipped (roles/recovery/files/boot-report.sh), run here on temporary files with the rendered unit's
arguments; journalctl and systemd-cat are stand-ins that log (nothing reaches this host's journal).

A real unclean boot (watchdog reset) is tests/vm/test_recovery_vm.py.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from sparkguard.engine.render import host_states
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.recovery.state import (
    BOOT_MARKER,
    BOOT_REPORT_SOURCE,
    BOOT_REPORT_UNIT,
    BOOT_TEXTFILE,
    BOOT_VERDICT,
    LAST_UNCLEAN,
)
from tests.conftest import REPO


def unit_args() -> list[str]:
    states = host_states(load_inventory(REPO / "inventory" / "example").host("spark-01"))
    unit = next(f.content for s in states for f in s.files if f.path.endswith(BOOT_REPORT_UNIT))
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))[2:]


@pytest.fixture
def node(tmp_path):
    """The unit's arguments with every path moved under tmp_path, and a PATH with the stand-ins."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("systemd-cat", "journalctl"):
        (bindir / tool).write_text(f"#!/bin/sh\necho \"{tool} $*\" >> {tmp_path}/log\ncat >/dev/null\n")
        (bindir / tool).chmod(0o755)
    moved = {path: str(tmp_path / Path(path).name) for path in (BOOT_MARKER, BOOT_VERDICT, BOOT_TEXTFILE, LAST_UNCLEAN)}
    args = [moved.get(a, a) for a in unit_args()]
    assert set(moved.values()) <= set(args), "the unit passes every path"
    return tmp_path, args, {"PATH": f"{bindir}:/usr/bin:/bin"}


def report(node, action: str, *extra: str) -> subprocess.CompletedProcess:
    tmp, args, env = node
    return subprocess.run(["sh", str(BOOT_REPORT_SOURCE), action, *args, *extra], env=env, capture_output=True,
                          text=True, timeout=30)


def test_a_clean_boot_then_an_unclean_one(node):
    tmp = node[0]
    assert report(node, "start").returncode == 0
    assert (tmp / Path(BOOT_VERDICT).name).read_text() == "0\n"
    assert "sparkguard_previous_boot_unclean 0" in (tmp / Path(BOOT_TEXTFILE).name).read_text()
    assert (tmp / Path(BOOT_MARKER).name).exists()
    # The node dies (no stop): the next boot finds the marker; /run (the verdict) is gone.
    (tmp / Path(BOOT_VERDICT).name).unlink()
    assert report(node, "start").returncode == 0
    assert (tmp / Path(BOOT_VERDICT).name).read_text() == "1\n"
    assert "previous boot ended uncleanly" in (tmp / Path(LAST_UNCLEAN).name).read_text()
    assert "systemd-cat -t sparkguard-boot-report -p warning" in (tmp / "log").read_text()
    # A restart of the unit within the boot keeps the verdict; a clean stop removes the marker.
    assert report(node, "start").returncode == 0
    assert (tmp / Path(BOOT_VERDICT).name).read_text() == "1\n"
    assert report(node, "stop").returncode == 0
    assert not (tmp / Path(BOOT_MARKER).name).exists()


@pytest.mark.parametrize("extra", [("--earlyoom-lines", "many"), ("--marker", "relative/path"), ("--bogus", "x"),
                                   ("--last",)])
def test_a_wrong_command_line_is_refused(node, extra):
    result = report(node, "start", *extra)
    assert result.returncode == 2 and "usage: boot-report" in result.stderr
    assert not (node[0] / Path(BOOT_MARKER).name).exists()


def test_no_action_is_refused(node):
    assert report(node, "").returncode == 2
