"""sparkguard's own pyinfra operations, table-driven like pyinfra's: facts in, commands out, no-change included."""

from __future__ import annotations

import hashlib
import shlex

import pytest

from sparkguard.engine.filestate import ManagedFilesState
from sparkguard.engine.operations import (
    CommandSucceeds,
    DirectoryStates,
    FileSpec,
    UnitFileState,
    directories,
    ensure,
    managed_file,
    managed_files,
    unit_masked,
)
from sparkguard.run import node_lock
from sparkguard.state import Directory
from tests.unit.operations_harness import commands, node

CONTENT = "EARLYOOM_ARGS=-m 10,5\n"
SHA = hashlib.sha256(CONTENT.encode()).hexdigest()
PATH = "/etc/default/earlyoom"
STAGE = "/etc/default/.sparkguard-stage"
BUNDLE = f"{STAGE}/.sparkguard-bundle.tar"
TEMP = None  # without sudo the upload goes straight to the bundle's place
UPLOAD = ".sparkguard-upload/" + hashlib.sha1(BUNDLE.encode()).hexdigest()
UNPACK = (f"tar -xOf {BUNDLE} 0 > {STAGE}/earlyoom && chown root:root {STAGE}/earlyoom && "
          f"chmod 0644 {STAGE}/earlyoom && rm -f {BUNDLE}")
CHECK = ("{ ( grep -q ARGS /etc/default/.sparkguard-stage/earlyoom\n ) || { echo '\"'\"'sparkguard: validation failed "
         "for /etc/default/earlyoom; the live file was not touched'\"'\"' >&2; rm -rf /etc/default/.sparkguard-stage; "
         "exit 1; }; }")
TOKEN = "4242:987654"
FENCED_COMMIT = "sh -c " + shlex.quote(
    "exec 8>>/run/sparkguard-commit.lock && " + node_lock.fenced(TOKEN, UNPACK) + " && "
    "{ ( grep -q ARGS /etc/default/.sparkguard-stage/earlyoom\n ) || { echo 'sparkguard: validation failed for "
    "/etc/default/earlyoom; the live file was not touched' >&2; " + node_lock.fenced(TOKEN, f"rm -rf {STAGE}") +
    "; exit 1; }; } && " + node_lock.fenced(TOKEN, f"mv -f {STAGE}/earlyoom {PATH} && rmdir {STAGE}"))


def state(mode="644", owner="root", group="root", sha=SHA):
    return {"mode": mode, "owner": owner, "group": group, "sha256": sha}


@pytest.mark.parametrize("current,kwargs,sudo,expected", [
    # No change: same content, mode and owner.
    (state(), {}, False, []),
    # Only the mode or the owner drifted: fixed in place, content not re-sent.
    (state(mode="600"), {}, False, [f"sh -c 'chmod 0644 {PATH}'"]),
    (state(owner="ops"), {}, False, [f"sh -c 'chown root:root {PATH}'"]),
    # New content: staged next to the target (one bundle upload), then ownership and the rename in one command.
    (None, {}, False, [
        f"mkdir -p /etc/default && mkdir -p -m 0700 {STAGE}",
        f"upload {BUNDLE} via {TEMP}",
        f"sh -c '{UNPACK} && mv -f {STAGE}/earlyoom {PATH} && rmdir {STAGE}'"]),
    # Validated, no lock held (plain pyinfra): the staged copy is checked first; a failure removes the stage
    # and leaves the live file. The rename is a command of its own, sent only after the check passed (a
    # killed apply's check that is still running on the node can never rename anything later).
    (state(sha="0" * 64), {"validate": "grep -q ARGS {path}"}, False, [
        f"mkdir -p /etc/default && mkdir -p -m 0700 {STAGE}",
        f"upload {BUNDLE} via {TEMP}",
        f"sh -c '{UNPACK} && {CHECK}'",
        f"sh -c 'mv -f {STAGE}/earlyoom {PATH} && rmdir {STAGE}'"]),
    # Validated under sparkguard's lock: check and rename in ONE command, the rename fenced by the lock's holder.
    (None, {"validate": "grep -q ARGS {path}", "fence": TOKEN}, False, [
        f"mkdir -p /etc/default && mkdir -p -m 0700 {STAGE}",
        f"upload {BUNDLE} via {TEMP}",
        FENCED_COMMIT]),
    # Under sudo the upload goes through the SSH user's private directory, never /tmp.
    (None, {}, True, [
        f"mkdir -p /etc/default && mkdir -p -m 0700 {STAGE} && "
        "test ! -L .sparkguard-upload && mkdir -p -m 0700 .sparkguard-upload && "
        "chown -h \"${SUDO_USER:-root}\" .sparkguard-upload && chmod 0700 .sparkguard-upload",
        f"upload {BUNDLE} via {UPLOAD}",
        f"sh -c '{UNPACK} && mv -f {STAGE}/earlyoom {PATH} && rmdir {STAGE}'"]),
])
def test_managed_file(current, kwargs, sudo, expected):
    with node(_sudo=True) if sudo else node():
        assert commands(managed_file, PATH, CONTENT, current=current, **kwargs) == expected


def test_managed_file_reads_its_own_state_when_not_given():
    with node({ManagedFilesState: {PATH: state()}}):
        assert commands(managed_file, PATH, CONTENT) == []


def test_managed_files_reads_only_what_it_was_not_given_in_one_round_trip():
    other = "/etc/sparkguard/node.json"
    asked = []

    def fact(cls, paths):
        asked.append(paths)
        return {other: None}

    with node() as fake:
        fake.get_fact = fact
        out = commands(managed_files, (FileSpec(PATH, CONTENT), FileSpec(other, "{}\n")), current={PATH: state()})
    assert asked == [(other,)]
    assert out[1] == "upload /etc/sparkguard/.sparkguard-stage/.sparkguard-bundle.tar via None"


def test_managed_files_goes_live_in_order_each_file_after_its_own_check():
    """A unit's check may run a script listed before it: that script is live before the unit is checked."""
    script, unit = "/usr/local/lib/sparkguard/x", "/etc/systemd/system/x.service"
    files = (FileSpec(script, "#!/bin/sh\n", mode="0755", validate="sh -n {path}"),
             FileSpec(unit, "[Service]\n", validate="test -x /usr/local/lib/sparkguard/x"),
             FileSpec(PATH, CONTENT))
    with node():
        last = commands(managed_files, files, current=dict.fromkeys((script, unit, PATH)), fence=TOKEN)[-1]
    order = [last.index(step) for step in (
        "tar -xOf /usr/local/lib/sparkguard/.sparkguard-stage/.sparkguard-bundle.tar 2 > /etc/default/.sparkguard-stage/earlyoom",
        "sh -n /usr/local/lib/sparkguard/.sparkguard-stage/x",
        "mv -f /usr/local/lib/sparkguard/.sparkguard-stage/x /usr/local/lib/sparkguard/x",
        "test -x /usr/local/lib/sparkguard/x",
        "mv -f /etc/systemd/system/.sparkguard-stage/x.service /etc/systemd/system/x.service",
        f"mv -f {STAGE}/earlyoom {PATH}",
        "rmdir /usr/local/lib/sparkguard/.sparkguard-stage /etc/systemd/system/.sparkguard-stage /etc/default/.sparkguard-stage")]
    assert order == sorted(order)


def test_managed_files_records_exactly_the_files_it_changed():
    from sparkguard.engine.operations import changed_paths

    files = (FileSpec(PATH, CONTENT), FileSpec("/etc/a", "a\n"), FileSpec("/etc/b", "b\n", mode="0600"))
    current = {PATH: state(), "/etc/a": None, "/etc/b": state(sha=hashlib.sha256(b"b\n").hexdigest())}
    with node():
        commands(managed_files, files, current=current)
        assert changed_paths("node-1", None) == ("/etc/a", "/etc/b")


@pytest.mark.parametrize("holds,expected", [
    (True, []),
    (False, ["sh -c 'swapoff -a'"]),
])
def test_ensure(holds, expected):
    with node({CommandSucceeds: holds}):
        assert commands(ensure, "! grep -q / /proc/swaps", "swapoff -a") == expected


@pytest.mark.parametrize("unit_state,masked,expected", [
    ("masked", True, []),
    ("enabled", True, ["systemctl mask swap.target"]),
    ("not-found", True, ["systemctl mask swap.target"]),
    ("masked", False, ["systemctl unmask swap.target"]),
    ("static", False, []),
])
def test_unit_masked(unit_state, masked, expected):
    with node({UnitFileState: unit_state}):
        assert commands(unit_masked, "swap.target", masked=masked) == expected


def test_managed_files_state_fact_one_round_trip(tmp_path):
    """The fact runs the probe's own ``fs`` helper: run for real on local files, parsed back."""
    import subprocess

    present, missing = tmp_path / "earlyoom", tmp_path / "gone"
    present.write_text(CONTENT)
    present.chmod(0o640)
    command = ManagedFilesState().command((str(present), str(missing)))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=10)
    found = ManagedFilesState().process(out.stdout.splitlines())
    assert found[str(missing)] is None
    assert found[str(present)]["sha256"] == SHA and found[str(present)]["mode"] == "640"


def test_managed_files_state_fact_leaves_a_mismatched_batch_unknown():
    output = ["@@FP\t/etc/a", "@@FP\t/etc/b", "@@FM\t644:root:root", f"@@FH\t{SHA}", "@@F\t/etc/c\tabsent\t-"]
    assert ManagedFilesState().process(output) == {"/etc/c": None}


@pytest.mark.parametrize("output,expected", [
    (["enabled"], "enabled"), (["masked"], "masked"), ([], "not-found"), (["", "static"], "static"),
])
def test_unit_file_state_fact(output, expected):
    assert UnitFileState().process(output) == expected


def test_matching_files_fact_finds_files_and_links_by_glob(tmp_path):
    import subprocess

    from sparkguard.engine.operations import MatchingFiles

    (tmp_path / "vllm").mkdir()
    for name in ("a.yaml", "b.yaml", "a.env", "notes.txt"):
        (tmp_path / "vllm" / name).write_text("x")
    (tmp_path / "vllm" / "c.yaml").symlink_to(tmp_path / "vllm" / "a.yaml")
    (tmp_path / "vllm" / "d.yaml").mkdir()  # a directory is never removed as a file
    (tmp_path / "mode").write_text("x")
    globs = (f"{tmp_path}/vllm/*.yaml", f"{tmp_path}/mode", f"{tmp_path}/missing/*.conf", f"{tmp_path}/gone")
    out = subprocess.run(["sh", "-c", MatchingFiles().command(globs)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    assert MatchingFiles().process(out.stdout.splitlines()) == sorted(
        f"{tmp_path}/{p}" for p in ("vllm/a.yaml", "vllm/b.yaml", "vllm/c.yaml", "mode"))


@pytest.mark.parametrize("units,expected", [
    ([], []),
    (["sparkguard-vllm@llama-8b.service", "sparkguard-vllm@qwen.service"], ["llama-8b", "qwen"]),
    (["sparkguard-vllm@.service", "sparkguard-vllm-training@x.service", "other.service"], []),
])
def test_instances_of_a_template(units, expected):
    from sparkguard.engine.operations import instances_of

    assert instances_of("sparkguard-vllm@{}.service", units) == expected


@pytest.mark.parametrize("seen,item,expected", [
    # As desired: nothing to do.
    ("755:root:root", Directory("/var/lib/sparkguard"), []),
    ("1733:root:root", Directory("/var/lib/sparkguard/events", "1733"), []),
    # Absent (or a link, which the probe reports as absent): created with its mode and owner; a link fails.
    ("absent", Directory("/var/lib/sparkguard"), [
        "sh -c 'test ! -L /var/lib/sparkguard && mkdir -p /var/lib/sparkguard && chmod 0755 /var/lib/sparkguard && "
        "chown root:root /var/lib/sparkguard'"]),
    # Mode drifted; a directory a package owns keeps its owner (None) and only gets the mode.
    ("700:prometheus:prometheus", Directory("/var/lib/prometheus", "0755", None, None), [
        "sh -c 'test ! -L /var/lib/prometheus && mkdir -p /var/lib/prometheus && chmod 0755 /var/lib/prometheus'"]),
    ("755:root:root", Directory("/srv/x", None, None, "adm"), [
        "sh -c 'test ! -L /srv/x && mkdir -p /srv/x && chgrp adm /srv/x'"]),
    ("755:root:root", Directory("/srv/x", None, "ops", None), [
        "sh -c 'test ! -L /srv/x && mkdir -p /srv/x && chown ops /srv/x'"]),
])
def test_directories(seen, item, expected):
    with node():
        assert commands(directories, (item,), current={item.path: seen}) == expected


def test_directories_read_what_they_were_not_given_in_one_round_trip():
    asked = []

    def fact(cls, paths):
        asked.append((cls, paths))
        return {"/b": "755:root:root", "/c": "absent"}

    items = (Directory("/a"), Directory("/b"), Directory("/c"))
    with node() as fake:
        fake.get_fact = fact
        out = commands(directories, items, current={"/a": "755:root:root"})
    assert asked == [(DirectoryStates, ("/b", "/c"))]
    assert out == ["sh -c 'test ! -L /c && mkdir -p /c && chmod 0755 /c && chown root:root /c'"]


def test_directory_states_fact_runs_the_probes_helper(tmp_path):
    import subprocess

    (tmp_path / "d").mkdir(mode=0o750)
    (tmp_path / "link").symlink_to(tmp_path / "d")
    paths = tuple(str(tmp_path / name) for name in ("d", "link", "gone"))
    out = subprocess.run(["sh", "-c", DirectoryStates().command(paths)], capture_output=True, text=True, timeout=10)
    found = DirectoryStates().process(out.stdout.splitlines())
    assert found[paths[0]].startswith("750:") and found[paths[1]] == "absent" and found[paths[2]] == "absent"
