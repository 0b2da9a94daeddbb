"""The full run's first phase: node tests spread over pytest-xdist workers, one group of tests at a time.

dev.sh runs the sandbox and VM tests that are not replays with ``-n N --dist loadgroup``: a worker takes a
whole group, and the next free worker the next group, so no lane idles while the other still has an hour's
queue (two fixed lanes ended 7 minutes apart on a machine that built its images first: 2026-12-07).

pytest-xdist's own loadgroup cannot do it here: it names a test's group by rewriting ``item._nodeid``, which
pytest 9 no longer reads (a node's ID is ``item._id``), so every test became a group of its own: the arm64
module's tests ran on both workers, each booting its own node, and failed (seen 2026-12-07). So the scheduling is ours (NodeGroupScheduling, through
xdist's ``pytest_xdist_make_scheduler`` hook): the workers, which collect, write each test's group to a file
the main process named (GROUPS_FILE), and the main process hands out whole groups from it.

A group is every test that shares a booted node. Tests that use one of the node tiers' session fixtures
(``vm_node``, ``sandbox_nodes``: a VM or sandbox booted once per process) must run in one worker, or a
second worker would boot its own copy; the modules they live in come along, so a module's own
module-scoped node is booted once too. Every other module is a group of its own.

Groups are handed out heaviest first (the longest-processing-time rule: the long ones start at once and
the short ones fill the gaps at the end), by the minutes each took here (MINUTES).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from xdist.scheduler.loadscope import LoadScopeScheduling

# The file in which the workers leave each test's group for the main process (a path, set by the main process).
GROUPS_FILE = "SPARKGUARD_NODE_GROUPS"

# Minutes each group took in phase 1 of a clean-clone run on this machine (2 cores, TCG), images included:
# only the order in which groups are handed out uses them. A group not listed counts as one minute.
MINUTES = {
    "vm_image+vm_node": 14.0,
    "tests/sandbox/test_arm64.py": 6.0,
    "sandbox_nodes": 5.0,
    "tests/vm/test_hardware_watchdog_vm.py": 4.0,
    "tests/sandbox/test_monitoring_peers.py": 2.6,
    "tests/sandbox/test_faults.py": 2.4,
    "tests/sandbox/test_ansible_export.py": 1.6,
}
NODE_FIXTURE_DIRS = ("tests/sandbox", "tests/vm")


def wanted(config: pytest.Config) -> bool:
    """True under ``--dist loadgroup``: in the main process (which hands out the groups) and in each worker
    (which collects and groups them; pytest-xdist sets a worker's ``dist`` to "no" and says ``loadgroup``
    instead)."""
    return config.getoption("dist", default="no") == "loadgroup" or bool(getattr(config.option, "loadgroup", False))


def _module(item: pytest.Item) -> str:
    return _module_of(item.nodeid)


def shared_fixtures(item: pytest.Item) -> set[str]:
    """The session-scoped fixtures of the node tiers this test uses (a booted VM, booted sandbox nodes)."""
    definitions = getattr(item, "_fixtureinfo", None)
    if definitions is None:
        return set()
    return {name for name, defs in definitions.name2fixturedefs.items()
            if any(d.scope == "session" and d.baseid.startswith(NODE_FIXTURE_DIRS) for d in defs)}


def groups(items: Iterable[pytest.Item]) -> dict[str, str]:
    """Node ID -> group name: the modules and shared fixtures that are linked through some test, merged.

    A group is named by its shared fixtures (``sandbox_nodes``), or, with none, by its module's path.
    """
    items = list(items)
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for item in items:
        for fixture in shared_fixtures(item):
            module, shared = find(_module(item)), find("fixture:" + fixture)
            if module != shared:
                parent[shared] = module
        find(_module(item))
    members: dict[str, set[str]] = {}
    for key in list(parent):
        members.setdefault(find(key), set()).add(key)
    names = {}
    for root, keys in members.items():
        fixtures = sorted(k[len("fixture:"):] for k in keys if k.startswith("fixture:"))
        names[root] = "+".join(fixtures) if fixtures else root
    return {item.nodeid: names[find(_module(item))] for item in items}


def schedule(items: list[pytest.Item]) -> dict[str, str]:
    """Put the groups heaviest first, in place (the tests of a group keep their order, and so do groups of equal
    weight), and say each test's group where the main process reads it (GROUPS_FILE); return node ID -> group."""
    group_of = groups(items)
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(group_of[item.nodeid], index)
    items.sort(key=lambda item: (-MINUTES.get(group_of[item.nodeid], 1.0), first_seen[group_of[item.nodeid]]))
    target = os.environ.get(GROUPS_FILE)
    if target:
        # Every worker collects the same tests and writes the same file: written whole, then renamed into place.
        with tempfile.NamedTemporaryFile("w", dir=Path(target).parent, delete=False, suffix=".tmp") as handle:
            json.dump(group_of, handle)
        os.replace(handle.name, target)
    return group_of


class NodeGroupScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling, with our groups as the scopes: a worker is handed a whole group, in the
    order the workers collected them (heaviest first: run it with ``--no-loadscope-reorder``)."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            path = os.environ.get(GROUPS_FILE)
            self._groups = json.loads(Path(path).read_text()) if path and Path(path).is_file() else {}
        return self._groups.get(nodeid) or _module_of(nodeid)


def _module_of(nodeid: str) -> str:
    return nodeid.split("::")[0]
