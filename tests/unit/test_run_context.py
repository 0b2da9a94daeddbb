"""A run's own knowledge lives in one RunContext, and a new run starts with none of the last one's."""

from __future__ import annotations

import ast
from types import SimpleNamespace

from sparkguard.run import context as run_context
from sparkguard.run import livediff, node_lock
from sparkguard.state import DesiredState, ManagedFile
from tests.conftest import REPO

# The modules that run an apply: what they remember between operations must be in the RunContext.
RUN_MODULES = ("engine/operations.py", "engine/converge.py", "run/snapshot.py", "run/livediff.py", "run/node_lock.py", "run/runner.py",
               "run/rollout.py")


def test_begin_starts_an_empty_run_and_current_is_that_run():
    first = run_context.begin()
    first.lock_tokens["node-1"] = "1:2"
    first.footprints[("node-1", "op")] = frozenset({"file:/etc/a"})
    second = run_context.begin()
    assert run_context.current() is second and second is not first
    assert second.lock_tokens == {} and second.footprints == {} and second.snapshots == {}
    assert second.diffs is None, "no diffs unless the run asked for them"


def test_a_run_that_began_nowhere_gets_one_on_first_use(monkeypatch):
    """plain `pyinfra INVENTORY deploy/site.py`: no sparkguard runner began a context."""
    monkeypatch.setattr(run_context, "_current", None)
    run = run_context.current()
    assert run_context.current() is run


def test_lock_tokens_fence_this_run_only_and_leave_with_the_lock():
    run_context.begin()
    lock = node_lock.NodeLock(channel=SimpleNamespace(close=lambda: None), token="41:99")
    node_lock.remember("node-1", lock)
    assert node_lock.fence_token("node-1") == "41:99"
    lock.release()
    assert node_lock.fence_token("node-1") is None
    node_lock.remember("node-1", lock)
    run_context.begin()
    assert node_lock.fence_token("node-1") is None, "the next run holds no lock it did not take"


def test_live_diffs_are_kept_only_in_a_run_that_asked_for_them():
    state = DesiredState("r", files=(ManagedFile("/etc/a", "new\n"),))
    live = {"/etc/a": livediff.LiveFile(b"old\n", None)}
    run_context.begin()
    assert not livediff.collecting()
    livediff.record("node-1", state, live)
    assert run_context.current().diffs is None
    run = run_context.begin(collect_diffs=True)
    assert livediff.collecting()
    livediff.record("node-1", state, live)
    assert run.diffs is not None and list(run.diffs) == ["node-1"] and "+new" in run.diffs["node-1"][0]


def _module_level_containers(path) -> list[str]:
    """Module-level variables (lower-case names: not constants, not ``__all__``) bound to a mutable container
    ({}, [], set(), dict(), list())."""
    found = []
    for node in ast.parse(path.read_text()).body:
        targets, value = ((node.targets, node.value) if isinstance(node, ast.Assign)
                          else ([node.target], node.value) if isinstance(node, ast.AnnAssign) else ([], None))
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set)) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("dict", "list", "set"))
        if mutable:
            found += [name for name in map(ast.unparse, targets) if name.strip("_").islower() and name != "__all__"]
    return found


def test_the_run_modules_keep_no_run_state_in_module_globals():
    found = {name: _module_level_containers(REPO / "sparkguard" / name) for name in RUN_MODULES}
    assert {name: names for name, names in found.items() if names} == {}, "put it in RunContext"
