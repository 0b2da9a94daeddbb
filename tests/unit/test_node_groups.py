"""Phase 1 of the full run hands out node tests a group at a time (tests/node_groups.py): a test that shares a
booted node with another runs in the same worker, or a second worker would boot that node again."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from tests.conftest import REPO
from tests.node_groups import MINUTES, groups, schedule


def fake_item(nodeid: str, *session_fixtures: str, module_fixtures: tuple[str, ...] = ()):
    defs = {name: [SimpleNamespace(scope="session", baseid="tests/vm")] for name in session_fixtures}
    defs |= {name: [SimpleNamespace(scope="module", baseid="tests/vm")] for name in module_fixtures}
    defs["tmp_path_factory"] = [SimpleNamespace(scope="session", baseid="")]  # pytest's own: shares no node
    markers = []
    return SimpleNamespace(nodeid=nodeid, _fixtureinfo=SimpleNamespace(name2fixturedefs=defs), markers=markers,
                           add_marker=markers.append)


def test_modules_linked_through_a_shared_node_are_one_group_and_the_rest_one_each():
    items = [
        fake_item("tests/vm/test_a.py::t1", "vm_node"),
        fake_item("tests/vm/test_a.py::t2"),                     # no fixture of its own: still its module's
        fake_item("tests/vm/test_b.py::t1", "vm_node", "vm_image"),
        fake_item("tests/vm/test_c.py::t1", "vm_image"),         # linked to vm_node's modules through vm_image
        fake_item("tests/sandbox/test_d.py::t1", "sandbox_nodes"),
        fake_item("tests/sandbox/test_e.py::t1", module_fixtures=("own_node",)),
        fake_item("tests/sandbox/test_e.py::t2", module_fixtures=("own_node",)),
    ]
    assert groups(items) == {
        "tests/vm/test_a.py::t1": "vm_image+vm_node", "tests/vm/test_a.py::t2": "vm_image+vm_node",
        "tests/vm/test_b.py::t1": "vm_image+vm_node", "tests/vm/test_c.py::t1": "vm_image+vm_node",
        "tests/sandbox/test_d.py::t1": "sandbox_nodes",
        "tests/sandbox/test_e.py::t1": "tests/sandbox/test_e.py", "tests/sandbox/test_e.py::t2": "tests/sandbox/test_e.py",
    }


def test_groups_go_heaviest_first_and_keep_their_tests_in_order():
    items = [
        fake_item("tests/sandbox/test_light.py::t1"),
        fake_item("tests/sandbox/test_ansible_export.py::t1"),
        fake_item("tests/vm/test_a.py::t1", "vm_node", "vm_image"),
        fake_item("tests/sandbox/test_light.py::t2"),
        fake_item("tests/vm/test_a.py::t2", "vm_node", "vm_image"),
        fake_item("tests/sandbox/test_other.py::t1"),
    ]
    schedule(items)
    assert [item.nodeid for item in items] == [
        "tests/vm/test_a.py::t1", "tests/vm/test_a.py::t2",          # vm_image+vm_node: the heaviest
        "tests/sandbox/test_ansible_export.py::t1",                   # measured, lighter
        "tests/sandbox/test_light.py::t1", "tests/sandbox/test_light.py::t2",   # unmeasured: as collected
        "tests/sandbox/test_other.py::t1",
    ]
    assert [m.args[0] for m in items[0].markers] == ["vm_image+vm_node"]
    assert items[0].markers[0].name == "xdist_group"


PRINT_GROUPS = """
import sys, pytest
class Groups:
    def pytest_collection_finish(self, session):
        for item in session.items:
            marker = item.get_closest_marker("xdist_group")
            print("GROUP", item.nodeid, marker.args[0] if marker else "-")
sys.exit(pytest.main(sys.argv[1:], plugins=[Groups()]))
"""


def test_the_suites_node_tests_are_grouped_by_the_nodes_they_share():
    """The real suite, collected as dev.sh's first phase collects it."""
    result = subprocess.run([sys.executable, "-c", PRINT_GROUPS, "--collect-only", "-q", "-p", "no:cacheprovider",
                             "--dist", "loadgroup", "-m", "(sandbox or vm) and not replay", "tests/sandbox", "tests/vm"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line[len("GROUP "):].rsplit(" ", 1) for line in result.stdout.splitlines() if line.startswith("GROUP ")]
    group_of_module: dict[str, set[str]] = {}
    for nodeid, group in rows:
        group_of_module.setdefault(nodeid.split("::")[0], set()).add(group)
    assert all(len(g) == 1 for g in group_of_module.values()), group_of_module
    # The session VM's modules share one worker, and so do the modules of the session's sandbox nodes.
    assert {m for m, g in group_of_module.items() if g == {"vm_image+vm_node"}} == {
        "tests/vm/test_recovery_vm.py", "tests/vm/test_swap_vm.py", "tests/vm/test_vm_harness.py"}
    assert "tests/sandbox/test_foundation.py" in {m for m, g in group_of_module.items() if g == {"sandbox_nodes"}}
    # Each group's tests are contiguous, and the groups come heaviest first.
    order = [group for i, (_, group) in enumerate(rows) if i == 0 or rows[i - 1][1] != group]
    assert len(order) == len(set(order)), order
    weights = [MINUTES.get(group, 1.0) for group in order]
    assert weights == sorted(weights, reverse=True) and order[0] == "vm_image+vm_node", order
