"""Each sandbox node in cgroups of its own (sparkguard/dev/node_cgroup.py): where they go, and their removal.

The /proc files are recorded formats: a host without systemd as init, with the hybrid layout (this
project's test machines), and a host with systemd and the v2 hierarchy only (a stock Debian 13).
Mount points are temporary directories, so nothing here touches the host's cgroups; the sandbox
tier checks the real ones (tests/sandbox/test_foundation.py, and the teardown in its conftest).
"""

from __future__ import annotations

from pathlib import Path

from sparkguard.dev import node_cgroup

HYBRID_MOUNTINFO = """\
31 23 0:28 / {root} rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / {root}/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / {root}/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = """\
9:name=systemd:/supervisor
4:memory:/process_api/1b0c735d
1:cpu:/
0::/supervisor
"""
V2_MOUNTINFO = "25 22 0:23 / {root} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V2_CGROUP = "0::/user.slice/user-0.slice/session-3.scope\n"


def proc(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    """A recorded /proc/self, its cgroup mounts under ``tmp_path / "cgroup"``."""
    root = tmp_path / "cgroup"
    self_dir = tmp_path / "self"
    self_dir.mkdir()
    (self_dir / "mountinfo").write_text(mountinfo.format(root=root))
    (self_dir / "cgroup").write_text(cgroup)
    return self_dir


def test_a_hybrid_host_gives_the_systemd_and_v2_hierarchies_not_the_controllers(tmp_path):
    root = tmp_path / "cgroup"
    found = node_cgroup.hierarchies(proc(tmp_path, HYBRID_MOUNTINFO, HYBRID_CGROUP))
    assert found == [root / "systemd/supervisor", root / "unified/supervisor"]


def test_a_systemd_host_gives_the_callers_own_scope(tmp_path):
    found = node_cgroup.hierarchies(proc(tmp_path, V2_MOUNTINFO, V2_CGROUP))
    assert found == [tmp_path / "cgroup/user.slice/user-0.slice/session-3.scope"]


def test_a_mount_of_a_subtree_is_followed_from_its_root(tmp_path):
    """In a container, the hierarchy is often mounted from a subtree: /proc/self/cgroup still names it whole."""
    mountinfo = "25 22 0:23 /docker/abc {root} rw - cgroup2 cgroup2 rw\n"
    found = node_cgroup.hierarchies(proc(tmp_path, mountinfo, "0::/docker/abc/ci\n"))
    assert found == [tmp_path / "cgroup/ci"]


def test_two_nodes_get_two_cgroups_each_holding_its_own_nspawn(tmp_path):
    self_dir = proc(tmp_path, HYBRID_MOUNTINFO, HYBRID_CGROUP)
    for parent in node_cgroup.hierarchies(self_dir):
        parent.mkdir(parents=True)
    first = node_cgroup.place(4101, "sg127077-node-1", self_dir)
    second = node_cgroup.place(4102, "sg127077-node-2", self_dir)
    assert first == [str(tmp_path / "cgroup/systemd/supervisor/sparkguard-sg127077-node-1"),
                     str(tmp_path / "cgroup/unified/supervisor/sparkguard-sg127077-node-1")]
    assert set(first).isdisjoint(second)
    assert [Path(d, "cgroup.procs").read_text() for d in first + second] == ["4101\n"] * 2 + ["4102\n"] * 2


def test_removal_goes_deepest_first_says_what_it_left_and_touches_nothing_else(tmp_path):
    own = tmp_path / "systemd/sparkguard-sg127077-node-1"
    (own / "payload/system.slice/ssh.service").mkdir(parents=True)
    (own / "supervisor").mkdir()
    busy = tmp_path / "unified/sparkguard-sg127077-node-1"
    (busy / "payload").mkdir(parents=True)
    (busy / "payload/held").write_text("")   # STAND-IN for a cgroup that still has a process: rmdir refuses it
    foreign = tmp_path / "systemd/payload"
    foreign.mkdir()
    outside = tmp_path.parent / "sparkguard-not-a-cgroup"
    outside.mkdir(exist_ok=True)
    left = node_cgroup.remove([str(own), str(busy), str(foreign), str(outside)], root=str(tmp_path))
    assert not own.exists()
    assert left == [str(busy / "payload"), str(busy)]
    assert foreign.exists() and outside.exists()
    outside.rmdir()


def test_a_recorded_path_that_climbs_out_of_the_root_is_not_followed(tmp_path):
    """The state file records the cgroups: a path with '..' is judged where it leads, not how it is spelled."""
    root = tmp_path / "cgroup"
    root.mkdir()
    escaped = tmp_path / "sparkguard-elsewhere"
    escaped.mkdir()
    assert node_cgroup.remove([str(root / ".." / "sparkguard-elsewhere")], root=str(root)) == []
    assert escaped.exists()

