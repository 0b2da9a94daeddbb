"""sparkguard's own pyinfra operations, table-driven like pyinfra's: facts in, commands out, no-change included."""

from __future__ import annotations

import hashlib

import pytest

from sparkguard.operations import (
    CommandSucceeds,
    ManagedFilesState,
    ManagedFileState,
    UnitFileState,
    ensure,
    managed_file,
    unit_masked,
)
from tests.unit.operations_harness import commands, node

CONTENT = "EARLYOOM_ARGS=-m 10,5\n"
SHA = hashlib.sha256(CONTENT.encode()).hexdigest()
PATH = "/etc/default/earlyoom"
STAGE = "/etc/default/.sparkguard-stage"
TEMP = "/tmp/pyinfra-" + hashlib.sha1(PATH.encode()).hexdigest()
UPLOAD = ".sparkguard-upload/" + hashlib.sha1(PATH.encode()).hexdigest()


def state(mode="644", owner="root", group="root", sha=SHA):
    return {"mode": mode, "owner": owner, "group": group, "sha256": sha}


@pytest.mark.parametrize("current,kwargs,sudo,expected", [
    # No change: same content, mode and owner.
    (state(), {}, False, []),
    # Only the mode or the owner drifted: fixed in place, content not re-sent.
    (state(mode="600"), {}, False, [f"chmod 0644 {PATH}"]),
    (state(owner="ops"), {}, False, [f"chown root:root {PATH}"]),
    # New content: staged next to the target, then ownership, validation and the rename in one command.
    (None, {}, False, [
        f"mkdir -p /etc/default && mkdir -p -m 0700 {STAGE}",
        f"upload {STAGE}/earlyoom via {TEMP}",
        f"sh -c 'chown root:root {STAGE}/earlyoom && chmod 0644 {STAGE}/earlyoom && "
        f"mv -f {STAGE}/earlyoom {PATH} && rmdir {STAGE}'"]),
    # Validated: the staged copy is checked first; a failure removes the stage and leaves the live file.
    # The rename is a command of its own, sent only after the check passed (a killed apply's check that
    # is still running on the node can never rename anything later).
    (state(sha="0" * 64), {"validate": "grep -q ARGS {path}"}, False, [
        f"mkdir -p /etc/default && mkdir -p -m 0700 {STAGE}",
        f"upload {STAGE}/earlyoom via {TEMP}",
        f"sh -c 'chown root:root {STAGE}/earlyoom && chmod 0644 {STAGE}/earlyoom && "
        f"{{ grep -q ARGS {STAGE}/earlyoom || {{ echo '\"'\"'sparkguard: validation failed for /etc/default/earlyoom; "
        f"the live file was not touched'\"'\"' >&2; rm -rf {STAGE}; exit 1; }}; }}'",
        f"sh -c 'mv -f {STAGE}/earlyoom {PATH} && rmdir {STAGE}'"]),
    # Under sudo the upload goes through the SSH user's private directory, never /tmp.
    (None, {}, True, [
        f"mkdir -p /etc/default && mkdir -p -m 0700 {STAGE} && "
        "test ! -L .sparkguard-upload && mkdir -p -m 0700 .sparkguard-upload && "
        "chown -h \"${SUDO_USER:-root}\" .sparkguard-upload && chmod 0700 .sparkguard-upload",
        f"upload {STAGE}/earlyoom via {UPLOAD}",
        f"sh -c 'chown root:root {STAGE}/earlyoom && chmod 0644 {STAGE}/earlyoom && "
        f"mv -f {STAGE}/earlyoom {PATH} && rmdir {STAGE}'"]),
])
def test_managed_file(current, kwargs, sudo, expected):
    with node(_sudo=True) if sudo else node():
        assert commands(managed_file, PATH, CONTENT, current=current, **kwargs) == expected


def test_managed_file_reads_its_own_state_when_not_given():
    with node({ManagedFileState: state()}):
        assert commands(managed_file, PATH, CONTENT) == []


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


@pytest.mark.parametrize("output,expected", [
    (["absent"], None),
    (["644 root root", SHA], state()),
    ([], None),
])
def test_managed_file_state_fact(output, expected):
    assert ManagedFileState().process(output) == expected


def test_managed_files_state_fact_one_round_trip():
    output = [f"{PATH}\t644 root root {SHA}", "/etc/sparkguard/node.json\tabsent"]
    assert ManagedFilesState().process(output) == {PATH: state(), "/etc/sparkguard/node.json": None}


@pytest.mark.parametrize("output,expected", [
    (["enabled"], "enabled"), (["masked"], "masked"), ([], "not-found"), (["", "static"], "static"),
])
def test_unit_file_state_fact(output, expected):
    assert UnitFileState().process(output) == expected


def test_matching_files_fact_finds_files_and_links_by_glob(tmp_path):
    import subprocess

    from sparkguard.operations import MatchingFiles

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
    from sparkguard.operations import instances_of

    assert instances_of("sparkguard-vllm@{}.service", units) == expected
