"""The node-side apply lock, run for real with flock: the first holder keeps it while its input is open."""

from __future__ import annotations

import select
import subprocess

import pytest

from sparkguard.errors import ConfigError
from sparkguard.run import node_lock, tunables


def start_holder(holder: str) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", node_lock.lock_command(holder, sudo=False, wait_s=1)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(autouse=True)
def lock_files_here(tmp_path, monkeypatch):
    monkeypatch.setattr(node_lock, "LOCK_FILE", str(tmp_path / "apply.lock"))
    monkeypatch.setattr(node_lock, "COMMIT_FILE", str(tmp_path / "commit.lock"))


def test_second_apply_is_refused_naming_the_holder_until_the_first_connection_ends(tmp_path):
    first = start_holder("sparkguard apply by alice@laptop (pid 1) since now")
    try:
        assert first.stdout.readline().split()[0] == node_lock.LOCKED
        second = start_holder("sparkguard apply by bob@ci (pid 2) since now")
        out, _ = second.communicate(timeout=10)
        assert second.returncode == node_lock.BUSY_EXIT
        assert "alice@laptop" in out
        assert (tmp_path / "apply.lock").stat().st_mode & 0o777 == 0o600
    finally:
        first.stdin.close()  # what sshd does when the apply's connection ends, however it ends
        first.wait(timeout=10)
    third = start_holder("sparkguard apply by bob@ci (pid 3) since now")
    try:
        assert third.stdout.readline().split()[0] == node_lock.LOCKED
    finally:
        third.stdin.close()
        third.wait(timeout=10)


def test_holder_text_is_quoted_and_printable():
    holder = node_lock.holder_description()
    assert holder.startswith("sparkguard apply by ") and all(c.isprintable() for c in holder)
    command = node_lock.lock_command("x'; touch /tmp/sg-pwn; '", sudo=True)
    assert command.startswith("sudo -n sh -c ")
    out = subprocess.run(["sh", "-c", f"printf '%s' {command[len('sudo -n sh -c '):]}"], capture_output=True,
                         text=True, timeout=10).stdout
    assert "printf '%s\\n' 'x'\"'\"'; touch /tmp/sg-pwn; '\"'\"''" in out


def test_the_wait_comes_from_the_environment_and_anything_but_a_number_is_refused(monkeypatch):
    monkeypatch.setenv("SPARKGUARD_LOCK_WAIT_S", "3")
    assert "flock -w 3 9" in node_lock.lock_command("h", sudo=False)
    monkeypatch.delenv("SPARKGUARD_LOCK_WAIT_S")
    assert f"flock -w {tunables.LOCK_WAIT.default} 9" in node_lock.lock_command("h", sudo=False)
    monkeypatch.setenv("SPARKGUARD_LOCK_WAIT_S", "3; reboot")
    with pytest.raises(ConfigError):
        node_lock.lock_command("h", sudo=False)


def test_a_new_holder_waits_for_a_fenced_step_of_the_last_apply_to_finish(tmp_path):
    """A step still running for a dead apply either ends before the next apply reads the node, or finds
    its holder gone (sparkguard.engine.operations.managed_files): here it holds the commit lock when the next
    holder arrives, and the next holder answers only once it let go."""
    step = subprocess.Popen(["sh", "-c", f"exec 8>>{tmp_path}/commit.lock && flock 8 && echo held && read _"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert step.stdout.readline().strip() == "held"
    holder = start_holder("next")
    try:
        assert select.select([holder.stdout], [], [], 1.0)[0] == []  # no answer while the step holds it
        step.stdin.close()
        step.wait(timeout=10)
        assert holder.stdout.readline().split()[0] == node_lock.LOCKED
    finally:
        step.kill()
        holder.stdin.close()
        holder.wait(timeout=10)
