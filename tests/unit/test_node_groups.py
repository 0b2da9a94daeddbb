"""Phase 1 of the full run hands out node tests a group at a time (tests/node_groups.py): a test that shares a
booted node with another runs in the same worker, or a second worker would boot that node again."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

from tests.conftest import REPO
from tests.node_groups import GROUPS_FILE, MINUTES, groups, schedule


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


def test_groups_go_heaviest_first_and_keep_their_tests_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv(GROUPS_FILE, str(tmp_path / "groups.json"))
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
    # What the main process hands out by: each test's group, as the workers wrote it.
    written = json.loads((tmp_path / "groups.json").read_text())
    assert written["tests/vm/test_a.py::t2"] == "vm_image+vm_node"
    assert written["tests/sandbox/test_light.py::t2"] == "tests/sandbox/test_light.py"


PRINT_GROUPS = """
import json, os, sys, pytest
from tests.node_groups import GROUPS_FILE
class Groups:
    def pytest_collection_finish(self, session):
        written = json.load(open(os.environ[GROUPS_FILE]))
        for item in session.items:
            print("GROUP", item.nodeid, written.get(item.nodeid, "-"))
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


def test_under_xdist_a_shared_node_is_booted_once_and_a_modules_node_once(tmp_path):
    """End to end, in a throw-away project whose conftest is the suite's own: two workers, a session-scoped
    "node" two modules share, and two modules with a module-scoped node each. Every node is set up exactly
    once, and the tests that share one run in the worker that set it up."""
    (tmp_path / "tests" / "sandbox").mkdir(parents=True)
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom tests.conftest import *  # noqa: F401,F403\n")
    log = tmp_path / "log"
    (tmp_path / "tests" / "sandbox" / "conftest.py").write_text(textwrap.dedent(f"""
        import os, pytest
        def note(what):
            with open({str(log)!r}, "a") as f:
                f.write(f"{{what}} {{os.environ.get('PYTEST_XDIST_WORKER', '-')}}\\n")
        @pytest.fixture(scope="session")
        def shared_node():
            note("boot shared")
            yield
        @pytest.fixture(scope="module")
        def own_node(request):
            note("boot " + request.module.__name__)
            yield
    """))
    for module, fixture in (("test_a", "shared_node"), ("test_b", "shared_node"), ("test_c", "own_node"),
                            ("test_d", "own_node")):
        (tmp_path / "tests" / "sandbox" / f"{module}.py").write_text("".join(
            f"from conftest import note\ndef test_{i}({fixture}):\n    note('ran {module} with {fixture}')\n"
            if i == 0 else f"def test_{i}({fixture}):\n    note('ran {module} with {fixture}')\n" for i in range(3)))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                             "--dist", "loadgroup", "--no-loadscope-reorder", "tests/sandbox"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.rsplit(" ", 1) for line in log.read_text().splitlines()]
    boots = [what for what, _ in lines if what.startswith("boot")]
    assert sorted(boots) == ["boot shared", "boot test_c", "boot test_d"], lines
    shared_worker = next(worker for what, worker in lines if what == "boot shared")
    assert {worker for what, worker in lines if "with shared_node" in what} == {shared_worker}, lines
    for module in ("test_c", "test_d"):
        assert len({worker for what, worker in lines if f"ran {module}" in what}) == 1, lines
    assert len([what for what, _ in lines if what.startswith("ran")]) == 12
