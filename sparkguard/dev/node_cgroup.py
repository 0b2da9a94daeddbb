"""A cgroup of its own for each sandbox node, so that two nodes never share a unit's cgroup.

systemd-nspawn with ``--keep-unit`` (the sandbox's nodes are not units: the host may have no systemd
as init, and a test's nodes live only as long as the test) moves the node's init into
``<nspawn's own cgroup>/payload`` and itself into ``.../supervisor``. Every nspawn started from the
same cgroup (one command's nodes; every pytest worker's, on a host without systemd) got the same
``payload``: each node's systemd made ``system.slice/<unit>.service`` in one shared directory, and a
unit running on two nodes had one cgroup for both. Each node's systemd reads the other node's
processes there as PID 0, which it takes for an I/O error: "Failed to kill control group
/system.slice/prometheus.service, ignoring: Input/output error", in a full run on 2026-12-07, where
the restart of Prometheus on the peers test's nodes then failed with status 219/CGROUP (the new
process could not be put in the unit's cgroup). The likely cause is another node's systemd emptying
or removing that shared cgroup under it. The failed systemd-journald restart of an earlier full run
fits the same cause.

Starting each nspawn in a cgroup of its own, ``<the caller's cgroup>/sparkguard-<machine>``, in every
hierarchy systemd uses (the v1 ``name=systemd`` one and the v2 one), keeps the nodes apart as real
machines are. ``remove`` takes those cgroups away once the node's processes are gone.
"""

from __future__ import annotations

import os
from pathlib import Path

PREFIX = "sparkguard-"
CGROUP_ROOT = "/sys/fs/cgroup"


def hierarchies(proc_self: Path = Path("/proc/self")) -> list[Path]:
    """This process's cgroup directory in each hierarchy systemd uses: the v1 ``name=systemd`` one and
    the v2 one, where they are mounted."""
    mounts: dict[str, tuple[str, str]] = {}   # "systemd" or "v2" -> (mount point, root of the mount)
    for line in (proc_self / "mountinfo").read_text().splitlines():
        fields, _, rest = line.partition(" - ")
        fstype, _, super_options = (rest.split() + ["", "", ""])[:3]
        root, mount_point = fields.split()[3:5]
        if fstype == "cgroup2":
            mounts.setdefault("v2", (mount_point, root))
        elif fstype == "cgroup" and "name=systemd" in super_options.split(","):
            mounts.setdefault("systemd", (mount_point, root))
    found = []
    for line in (proc_self / "cgroup").read_text().splitlines():
        hierarchy_id, controllers, path = line.split(":", 2)
        kind = "v2" if hierarchy_id == "0" and controllers == "" else "systemd" if controllers == "name=systemd" else None
        if kind in mounts:
            mount_point, root = mounts[kind]
            below_root = path == root or path.startswith(root.rstrip("/") + "/")
            inside = os.path.relpath(path, root) if below_root else path.lstrip("/")
            found.append(Path(os.path.normpath(Path(mount_point) / inside)))
    return found


def place(pid: int, machine: str, proc_self: Path = Path("/proc/self")) -> list[str]:
    """Make ``<this process's cgroup>/sparkguard-<machine>`` in each hierarchy and move ``pid`` into it;
    return the directories made (for ``remove``). Raises OSError where a hierarchy refuses."""
    made = []
    for parent in hierarchies(proc_self):
        own = parent / f"{PREFIX}{machine}"
        own.mkdir(exist_ok=True)
        made.append(str(own))
        (own / "cgroup.procs").write_text(f"{pid}\n")
    return made


def remove(directories: list[str], root: str = CGROUP_ROOT) -> list[str]:
    """Remove the cgroups ``place`` made, and what the node's systemd left in them, deepest first; return
    those still there (a process in them). Only sparkguard's own cgroups, under ``root``, are touched."""
    left = []
    for directory in directories:
        own = Path(os.path.normpath(directory))
        if not (own.name.startswith(PREFIX) and own.is_relative_to(root)):
            continue
        for below, _, _ in os.walk(own, topdown=False):
            try:
                os.rmdir(below)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(below)
    return left
