"""Apply's snapshot: operations that are given the node's current state need no round trip of their own
while it holds, and act as pyinfra's own operations do (reading the node) once anything has changed.

Table-driven like pyinfra's operation tests: the known state in, commands out, the no-change case included.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.server import Sysctl
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from sparkguard.audit.checks import ProbeOutput
from sparkguard.engine import operations
from sparkguard.engine.filestate import file_state
from sparkguard.engine.operations import (
    CommandSucceeds,
    DirectoryStates,
    Known,
    UnitFileState,
    directories,
    ensure,
    service,
    sysctl,
    unit_masked,
)
from sparkguard.engine.probe import HELPERS, NodeProbe, parse_output, q
from sparkguard.facts import parse_probe
from sparkguard.run import context as run_context
from sparkguard.run import snapshot
from sparkguard.state import Directory as StateDirectory
from tests.unit.operations_harness import commands, node

FRESH, STALE = (lambda: True), (lambda: False)
SERVICE = "earlyoom.service"


@pytest.mark.parametrize("known,live_facts,expected", [
    # Known and as desired: nothing to do, nothing read.
    (Known("755:root:root", FRESH), {}, []),
    # Known and different: fixed in one command.
    (Known("700:root:root", FRESH), {}, ["sh -c 'test ! -L /var/lib/sparkguard/runs && mkdir -p /var/lib/sparkguard/runs "
                                         "&& chmod 0755 /var/lib/sparkguard/runs && chown root:root /var/lib/sparkguard/runs'"]),
    # Stale (something changed since the snapshot): the node is read again, whatever was known.
    (Known("absent", STALE), {DirectoryStates: {"/var/lib/sparkguard/runs": "755:root:root"}}, []),
    (Known("755:root:root", STALE), {DirectoryStates: {"/var/lib/sparkguard/runs": "absent"}},
     ["sh -c 'test ! -L /var/lib/sparkguard/runs && mkdir -p /var/lib/sparkguard/runs "
      "&& chmod 0755 /var/lib/sparkguard/runs && chown root:root /var/lib/sparkguard/runs'"]),
])
def test_directory(known, live_facts, expected):
    with node(live_facts):
        item = StateDirectory("/var/lib/sparkguard/runs", "0755", "root", "root")
        assert commands(directories, (item,), current={item.path: known}) == expected


@pytest.mark.parametrize("known,live_facts,expected", [
    (Known({"SubState": "running", "UnitFileState": "enabled"}, FRESH), {}, []),
    # exited (a oneshot that ran) and static count as running and enabled, as in pyinfra's facts.
    (Known({"SubState": "exited", "UnitFileState": "static"}, FRESH), {}, []),
    # Known and different: what pyinfra would run for that state, without reading the node again.
    (Known({"SubState": "dead", "UnitFileState": "enabled"}, FRESH), {}, [f"systemctl start {SERVICE}"]),
    (Known({"SubState": "running", "UnitFileState": "disabled"}, FRESH), {}, [f"systemctl enable {SERVICE}"]),
    (Known({"SubState": "dead", "UnitFileState": ""}, FRESH), {},  # a unit systemd does not know yet
     [f"systemctl start {SERVICE}", f"systemctl enable {SERVICE}"]),
    # Stale: pyinfra's facts decide (here the unit stopped meanwhile).
    (Known({"SubState": "running", "UnitFileState": "enabled"}, STALE),
     {SystemdStatus: {SERVICE: False}, SystemdEnabled: {SERVICE: True}}, [f"systemctl start {SERVICE}"]),
    # Not read by the snapshot (an unknown shape): pyinfra's facts decide.
    (Known({}, FRESH), {SystemdStatus: {SERVICE: True}, SystemdEnabled: {SERVICE: True}}, []),
])
def test_service(known, live_facts, expected):
    with node(live_facts) as fake:
        fake.noop = lambda *_: None
        assert commands(service, SERVICE, True, True, current=known) == expected


@pytest.mark.parametrize("known,live_facts,expected", [
    (Known("10", FRESH), {}, []),
    (Known("60", FRESH), {Sysctl: {"vm.swappiness": 60}}, ["sysctl vm.swappiness=10"]),
    (Known("10", STALE), {Sysctl: {"vm.swappiness": 60}}, ["sysctl vm.swappiness=10"]),
])
def test_sysctl(known, live_facts, expected):
    with node(live_facts) as fake:
        fake.noop = lambda *_: None
        assert commands(sysctl, "vm.swappiness", "10", current=known) == expected


@pytest.mark.parametrize("known,live_fact,expected", [
    (Known(True, FRESH), None, []),
    (Known(False, FRESH), None, ["sh -c 'swap-toggle off'"]),
    (Known(True, STALE), False, ["sh -c 'swap-toggle off'"]),
    (Known(False, STALE), True, []),
])
def test_ensure(known, live_fact, expected):
    with node({CommandSucceeds: live_fact}):
        assert commands(ensure, "swap-toggle none-active", "swap-toggle off", holds=known) == expected


@pytest.mark.parametrize("known,expected", [
    (Known("masked", FRESH), []),
    (Known("static", FRESH), ["systemctl mask swap.target"]),
    (Known("masked", STALE), ["systemctl mask swap.target"]),  # the node (below) says static
])
def test_unit_masked(known, expected):
    with node({UnitFileState: "static"}):
        assert commands(unit_masked, "swap.target", True, current=known) == expected


def test_probe_output_becomes_what_the_operations_take():
    text = "\n".join([
        "memtotal_kb=1000", "container=none",
        "@@F\t/etc/default/earlyoom\t644:root:root\tab12",
        "@@F\t/etc/fstab\tabsent\t-",
        "@@T\t/var/lib/sparkguard/runs\t755:root:root",
        "@@UN\tearlyoom.service",
        "@@UV\tSubState=running UnitFileState=enabled",
        "@@R\tleftovers\tpending:earlyoom.service.restart /etc/default/.sparkguard-stage "
        "/etc/other/.sparkguard-stage .sparkguard-upload/3f2a",
    ])
    snap = parse_output(text)
    assert file_state(snap.files["/etc/default/earlyoom"]) == {
        "mode": "644", "owner": "root", "group": "root", "sha256": "ab12"}
    assert file_state(snap.files["/etc/fstab"]) is None
    assert snap.directories == {"/var/lib/sparkguard/runs": "755:root:root"}
    assert snap.units == {"earlyoom.service": {"SubState": "running", "UnitFileState": "enabled"}}
    # Only this role's staging directories; uploads and pending markers are every role's business.
    assert snapshot.leftovers(snap, ("/etc/default",)) == {
        "staging": ["/etc/default/.sparkguard-stage"], "uploads": [".sparkguard-upload/3f2a"],
        "pending": ["earlyoom.service.restart"]}


class FakeHost:
    name = "node-1"

    def __init__(self, current_op_hash: str, op_hash_order: list[str]) -> None:
        self.current_op_hash, self.op_hash_order = current_op_hash, op_hash_order


def _run(ops: list[tuple[str, bool | None]], current: str, item: str | None = None, since: str | None = None,
         touched: dict[str, set[str]] | None = None) -> bool:
    """``fresh(item, since)`` inside operation ``current`` of a host whose earlier operations changed (True),
    did not change (False) or have not run (None, a dry run); ``touched``: what an operation said it touched."""
    metas = {}
    for name, changed in ops:
        meta = SimpleNamespace(is_complete=lambda c=changed: c is not None, did_change=lambda c=changed: bool(c))
        metas[name] = SimpleNamespace(operation_meta=meta)
    fake_host = FakeHost(current, [name for name, _ in ops])
    fake_state = SimpleNamespace(ops={fake_host: metas})
    run = run_context.begin()
    for op_hash, items in (touched or {}).items():
        run.footprints[("node-1", op_hash)] = frozenset(items)
    with ctx_host.use(fake_host), ctx_state.use(fake_state):
        return snapshot.fresh(item, since)


@pytest.mark.parametrize("ops,current,fresh", [
    ([("a", False), ("b", False), ("c", None)], "c", True),     # nothing changed before c
    ([("a", False), ("b", True), ("c", None)], "c", False),     # b changed the node: c reads it again
    ([("a", False), ("b", None), ("c", True)], "b", True),      # a later change does not count
    ([("a", None), ("b", None), ("c", None)], "c", True),       # dry run: nothing executes
])
def test_the_snapshot_holds_until_the_first_change(ops, current, fresh):
    assert _run(ops, current) is fresh


A, B = operations.file_item("/etc/a"), operations.file_item("/etc/b")


@pytest.mark.parametrize("ops,current,item,since,touched,fresh", [
    # A written file touched only itself: what is known of another file still holds ...
    ([("w_a", True), ("w_b", None)], "w_b", B, None, {"w_a": {A}}, True),
    # ... but not of the file it wrote, nor for a question about everything.
    ([("w_a", True), ("x", None)], "x", A, None, {"w_a": {A}}, False),
    ([("w_a", True), ("x", None)], "x", None, None, {"w_a": {A}}, False),
    # An operation that cannot say what it touched (packages, a restart) touched everything.
    ([("apt", True), ("w_b", None)], "w_b", B, None, {}, False),
    # A read taken later (in w_a, after apt) holds for b while only other files were written since.
    ([("apt", True), ("w_a", True), ("w_b", None)], "w_b", B, "w_a", {"w_a": {A}}, True),
    ([("apt", True), ("w_a", True), ("fix", True), ("w_b", None)], "w_b", B, "w_a", {"w_a": {A}}, False),
])
def test_what_a_change_touched_decides_what_still_holds(ops, current, item, since, touched, fresh):
    assert _run(ops, current, item, since, touched) is fresh


def test_once_stale_a_role_is_read_again_in_one_round_trip():
    """Fresh apply: the packages changed the node, so the first question about a role reads the whole role
    again (its probe lines only, one command); the next file (only the first was written meanwhile) and the
    role's units use that read, and a change that could touch anything makes the next question read again."""
    from sparkguard.state import DesiredState, ManagedFile, Service

    role = DesiredState(role="r", files=(ManagedFile("/etc/a", "a\n"), ManagedFile("/etc/b", "b\n")),
                        services=(Service("r.service", running=True, enabled=True),))
    scripts: list[str] = []
    answer = "\n".join(["@@F\t/etc/a\tabsent\t-", "@@FP\t/etc/b", "@@FM\t644:root:root", "@@FH\tab",
                        "@@UN\tr.service", "@@UV\tSubState=dead UnitFileState=disabled"])

    class Host(FakeHost):
        def get_fact(self, fact, script="", **_):
            assert fact is NodeProbe
            scripts.append(script)
            return answer

    metas = {}
    order = ["apt", "w_a", "w_b", "fix", "w_c"]
    changed = {"apt": True, "w_a": True, "w_b": False, "fix": True}
    for name in order:
        meta = SimpleNamespace(is_complete=lambda n=name: n in changed, did_change=lambda n=name: changed.get(n, False))
        metas[name] = SimpleNamespace(operation_meta=meta)
    fake_host = Host("w_a", order)
    run_context.begin()
    files = partial(snapshot.picked, lambda read: read.files, convert=file_state)
    with ctx_host.use(fake_host), ctx_state.use(SimpleNamespace(ops={fake_host: metas})):
        first = snapshot.known(None, operations.file_item("/etc/a"), role, files(key="/etc/a"))
        assert operations.resolve(first, lambda: pytest.fail("the role's read, not the file's own")) is None
        operations._touches(operations.file_item("/etc/a"))     # w_a writes /etc/a
        fake_host.current_op_hash = "w_b"
        second = snapshot.known(None, operations.file_item("/etc/b"), role, files(key="/etc/b"))
        assert operations.resolve(second, lambda: pytest.fail("not read again")) == {
            "mode": "644", "owner": "root", "group": "root", "sha256": "ab"}
        assert len(scripts) == 1 and "fs /etc/a /etc/b" in scripts[0] and "su r.service" in scripts[0]
        assert "memtotal_kb" not in scripts[0]  # the role's lines, not the node's facts again
        fake_host.current_op_hash = "w_c"                        # 'fix' changed something unknown
        unit = snapshot.known(None, None, role, snapshot.picked(lambda read: read.units, "r.service"))
        assert operations.resolve(unit, lambda: None) == {"SubState": "dead", "UnitFileState": "disabled"}
        assert len(scripts) == 2
        # Something the role's read could not tell: the operation reads it itself.
        gone = snapshot.known(None, None, role, snapshot.picked(lambda read: read.sysctls, "vm.swappiness"))
        assert operations.resolve(gone, lambda: "own read") == "own read"


def test_a_probe_that_read_nothing_is_no_snapshot_of_a_role():
    snap = ProbeOutput(info=parse_probe("memtotal_kb=1000"))
    assert snap.files == {} and snap.packages == {}


def _probe_locally(lines: list[str]) -> str:
    """Run the probe's helpers and ``lines`` with this machine's sh (real stat, sha256sum, awk)."""
    import subprocess

    return subprocess.run(["sh", "-c", HELPERS + "\n" + "\n".join(lines)], capture_output=True, text=True,
                          check=True).stdout


def test_files_are_read_in_one_batch_and_match_the_file_by_file_reading(tmp_path):
    import hashlib
    import os

    plain, spaced, empty = tmp_path / "default", tmp_path / "with space", tmp_path / "empty"
    plain.write_text("EARLYOOM_ARGS=-m 5\n")
    spaced.write_text("x")
    empty.write_text("")
    os.chmod(plain, 0o640)
    missing = tmp_path / "missing"
    paths = [plain, missing, spaced, empty]
    snap = parse_output(_probe_locally(["fs " + " ".join(q(str(p)) for p in paths)]))
    owner = f"{__import__('pwd').getpwuid(os.getuid()).pw_name}:{__import__('grp').getgrgid(os.getgid()).gr_name}"
    assert snap.files == {
        str(plain): (f"640:{owner}", hashlib.sha256(plain.read_bytes()).hexdigest()),
        str(missing): ("absent", "-"),
        str(spaced): (f"644:{owner}", hashlib.sha256(b"x").hexdigest()),
        str(empty): (f"644:{owner}", hashlib.sha256(b"").hexdigest()),
    }
    # The batch agrees with the file-by-file helper that audit's glob lines use.
    single = parse_output(_probe_locally([f"f @@F {q(str(p))}" for p in paths]))
    assert single.files == snap.files


def test_a_name_that_would_break_the_lines_is_left_unknown(tmp_path):
    """A name with a newline or tab (validation refuses those) is not read, so no other file gets its answer."""
    odd, tabbed, fine = tmp_path / "two\nlines", tmp_path / "a\tb", tmp_path / "fine"
    for path in (odd, tabbed, fine):
        path.write_text("y")
    snap = parse_output(_probe_locally([f"fs {q(str(odd))} {q(str(tabbed))} {q(str(fine))}"]))
    assert list(snap.files) == [str(fine)]


def test_a_batch_whose_answers_do_not_line_up_leaves_every_item_unknown():
    text = "@@FP\t/etc/a\n@@FP\t/etc/b\n@@FM\t644:root:root\n@@FH\t" + "0" * 64
    assert parse_output(text).files == {}


@pytest.mark.parametrize("text,services,units", [
    # Recorded from systemd 252 (bookworm): is-enabled per unit, one is-active and one show for the batch;
    # a unit that does not exist is '' (is-enabled prints nothing) and inactive.
    ("@@E\tssh.service\tenabled\n@@E\tnosuch.service\t\n@@SN\tssh.service\n@@SN\tnosuch.service\n"
     "@@SA\tactive\n@@SA\tinactive\n@@UN\tssh.service\n@@UN\tnosuch.service\n"
     "@@UV\tSubState=running UnitFileState=enabled\n@@UV\tSubState=dead UnitFileState=",
     {"ssh.service": ("enabled", "active"), "nosuch.service": ("", "inactive")},
     {"ssh.service": {"SubState": "running", "UnitFileState": "enabled"},
      "nosuch.service": {"SubState": "dead", "UnitFileState": ""}}),
    # systemctl failed for the whole batch (no answers): unknown, so audit reports and apply reads itself.
    ("@@E\tssh.service\tenabled\n@@SN\tssh.service\n@@UN\tssh.service", {}, {}),
])
def test_service_batches(text, services, units):
    snap = parse_output(text)
    assert snap.services == services and snap.units == units
