"""What an apply that died half-way leaves, and how the next one finishes its work (table-driven).

Facts in, commands out, including the no-change case. The leftovers fact's shell runs for real
against a directory tree made here (its pending directory pointed into that tree).
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess

import pytest

from sparkguard.engine import operations
from sparkguard.engine.converge import DAEMON_RELOAD, _markers
from sparkguard.engine.operations import Leftovers, leftovers_removed, managed_file, pending_marker, service_action
from tests.unit.operations_harness import commands, node
from tests.unit.test_audit import example


@pytest.fixture
def fake_host():
    with node() as fake:
        yield fake


def test_leftovers_fact_finds_staging_uploads_and_pending(tmp_path, monkeypatch):
    monkeypatch.setattr(operations, "PENDING_DIR", str(tmp_path / "pending"))
    (tmp_path / "etc" / ".sparkguard-stage").mkdir(parents=True)
    (tmp_path / "clean").mkdir()
    (tmp_path / "home" / ".sparkguard-upload").mkdir(parents=True)
    (tmp_path / "home" / ".sparkguard-upload" / "0abc").write_text("half")
    (tmp_path / "pending").mkdir()
    (tmp_path / "pending" / "earlyoom.service.restart").write_text("")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / ".sparkguard-stage").symlink_to(tmp_path / "etc")  # never followed into rm -rf
    command = Leftovers().command((str(tmp_path / "etc"), str(tmp_path / "clean"), str(tmp_path / "linked")))
    out = subprocess.run(["sh", "-c", command], cwd=tmp_path / "home", capture_output=True, text=True, timeout=10)
    assert Leftovers().process(out.stdout.splitlines()) == {
        "staging": [str(tmp_path / "etc" / ".sparkguard-stage")],
        "uploads": [".sparkguard-upload/0abc"],
        "pending": ["earlyoom.service.restart"],
    }


def test_leftovers_fact_on_a_clean_node_finds_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(operations, "PENDING_DIR", str(tmp_path / "pending"))
    out = subprocess.run(["sh", "-c", Leftovers().command((str(tmp_path),))], cwd=tmp_path, capture_output=True,
                         text=True, timeout=10)
    assert out.returncode == 0
    assert Leftovers().process(out.stdout.splitlines()) == {"staging": [], "uploads": [], "pending": []}


@pytest.mark.parametrize("found,expected", [
    ({"staging": [], "uploads": [], "pending": []}, []),
    ({"staging": [], "uploads": [], "pending": ["earlyoom.service.restart"]}, []),  # pending: the restart's job
    ({"staging": ["/etc/default/.sparkguard-stage"], "uploads": [".sparkguard-upload/ab"], "pending": []},
     ["rm -rf -- /etc/default/.sparkguard-stage .sparkguard-upload/ab"]),
    ({"staging": ["/etc/it's/.sparkguard-stage"], "uploads": [], "pending": []},
     ["rm -rf -- '/etc/it'\"'\"'s/.sparkguard-stage'"]),
])
def test_leftovers_removed(found, expected):
    assert commands(leftovers_removed, ("/etc/default",), found=found) == expected


@pytest.mark.parametrize("service,action,expected", [
    ("earlyoom.service", "restart",
     "t=$(date +%s); systemctl restart earlyoom.service || { rc=$?; echo \"systemd: $(systemctl show -p Result "
     "-p ExecMainStatus -p ActiveState -p SubState -p NRestarts earlyoom.service | paste -sd ' ')\" >&2; "
     "journalctl --sync 2>/dev/null; "
     "journalctl -u earlyoom.service --since @$t -n 6 --no-pager -o cat >&2; exit $rc; } "
     "&& rm -f /var/lib/sparkguard/pending/earlyoom.service.restart"),
    ("prometheus.service", "reload",
     "t=$(date +%s); systemctl reload prometheus.service || { rc=$?; echo \"systemd: $(systemctl show -p Result "
     "-p ExecMainStatus -p ActiveState -p SubState -p NRestarts prometheus.service | paste -sd ' ')\" >&2; "
     "journalctl --sync 2>/dev/null; "
     "journalctl -u prometheus.service --since @$t -n 6 --no-pager -o cat >&2; exit $rc; } "
     "&& rm -f /var/lib/sparkguard/pending/prometheus.service.reload"),
    ("", "daemon-reload", "systemctl daemon-reload && rm -f /var/lib/sparkguard/pending/systemd.daemon-reload"),
])
def test_service_action_runs_then_clears_its_marker(service, action, expected):
    marker = DAEMON_RELOAD if action == "daemon-reload" else pending_marker(service, action)
    assert commands(service_action, service, action, marker) == [f"sh -c {shlex.quote(expected)}"]


FAKE_SYSTEMCTL = ("#!/bin/sh\n[ \"$1\" = show ] && { printf 'Result=exit-code\\nExecMainStatus=1\\n'; exit 0; }\n"
                  "echo \"Job for $2 failed because the control process exited with error code.\" >&2\nexit 1\n")
# Records its arguments, prints what the unit said.
FAKE_JOURNALCTL = ("#!/bin/sh\n[ \"$1\" = --sync ] && { touch \"$(dirname \"$0\")/journalctl.synced\"; exit 0; }\n"
                   "echo \"$@\" > \"$(dirname \"$0\")/journalctl.args\"\n"
                   "echo 'Error opening query log file: permission denied'\n")


@pytest.mark.parametrize("fails", [True, False])
def test_a_failed_restart_says_what_the_unit_said_and_keeps_its_marker(tmp_path, fails):
    """The command as the node runs it (sh -c), against a systemctl that fails or succeeds and a journal stand-in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL if fails else "#!/bin/sh\nexit 0\n")
    (bin_dir / "journalctl").write_text(FAKE_JOURNALCTL)
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    marker = tmp_path / "prometheus.service.restart"
    marker.write_text("")
    [command] = commands(service_action, "prometheus.service", "restart", str(marker))
    out = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=10,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    if not fails:
        assert (out.returncode, out.stderr, marker.exists()) == (0, "", False)
        assert not (bin_dir / "journalctl.args").exists(), "the journal is read only when the action failed"
        return
    assert out.returncode == 1 and marker.exists(), "a failed restart stays pending for the next apply"
    assert out.stderr.splitlines() == [
        "Job for prometheus.service failed because the control process exited with error code.",
        "systemd: Result=exit-code ExecMainStatus=1",
        "Error opening query log file: permission denied"]
    args = (bin_dir / "journalctl.args").read_text().split()
    assert args[:3] == ["-u", "prometheus.service", "--since"] and args[3].startswith("@")
    assert (bin_dir / "journalctl.synced").exists(), "the journal is synced before it is read"


def test_unchanged_file_sets_no_marker(fake_host):
    content = "EARLYOOM_ARGS=\n"
    current = {"mode": "644", "owner": "root", "group": "root", "sha256": hashlib.sha256(content.encode()).hexdigest()}
    assert commands(managed_file, "/etc/default/earlyoom", content, current=current,
                    pending=(pending_marker("earlyoom.service", "restart"),)) == []


def test_changed_file_records_its_restart_before_it_goes_live(fake_host):
    marker = pending_marker("earlyoom.service", "restart")
    out = commands(managed_file, "/etc/default/earlyoom", "EARLYOOM_ARGS=-m 5\n", current=None, pending=(marker,))
    last = out[-1]
    assert last.endswith(f"&& mkdir -p -m 0700 /var/lib/sparkguard/pending && touch {marker} && "
                         "mv -f /etc/default/.sparkguard-stage/earlyoom /etc/default/earlyoom && "
                         "rmdir /etc/default/.sparkguard-stage'")


def test_markers_follow_the_roles_restart_and_reload_lists():
    entry, states = example()
    earlyoom = next(s for s in states if s.role == "earlyoom")
    assert pending_marker("earlyoom.service", "restart") in _markers(earlyoom, "/etc/default/earlyoom")
    for state in states:
        for managed in state.files:
            markers = _markers(state, managed.path)
            assert (DAEMON_RELOAD in markers) == managed.is_systemd_unit, managed.path
            for service in state.services:
                if service.running and managed.path in service.restart_on:
                    assert pending_marker(service.name, "restart") in markers
                if not service.running:
                    assert pending_marker(service.name, "restart") not in markers


def _run_locally(op, **kwargs) -> subprocess.CompletedProcess:
    """Run ``op``'s commands here, as the node would (an upload is written where it goes); stop at a failure."""
    from pyinfra.api import FileUploadCommand

    with node():
        generated = list(op._inner(**kwargs))
    done = subprocess.CompletedProcess([], 0, "", "")
    for command in generated:
        if isinstance(command, FileUploadCommand):
            with open(command.dest, "wb") as out:
                out.write(command.src.getvalue())
            continue
        done = subprocess.run(["sh", "-c", command.get_raw_value()], capture_output=True, text=True, timeout=30)
        if done.returncode:
            break
    return done


@pytest.fixture
def holder(tmp_path, monkeypatch):
    """A real node lock holder (node_lock.lock_command, as an apply's SSH channel runs it) and its token."""
    from sparkguard.run import node_lock

    monkeypatch.setattr(node_lock, "LOCK_FILE", str(tmp_path / "apply.lock"))
    monkeypatch.setattr(node_lock, "COMMIT_FILE", str(tmp_path / "commit.lock"))
    monkeypatch.setattr(operations, "PENDING_DIR", str(tmp_path / "pending"))
    process = subprocess.Popen(["sh", "-c", node_lock.lock_command("test", sudo=False, wait_s=1)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    word, pid, start = process.stdout.readline().split()
    assert word == node_lock.LOCKED and pid.isdigit() and start.isdigit()
    yield process, f"{pid}:{start}"
    process.stdin.close()
    process.wait(timeout=10)


def _owner():
    import grp
    import os
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name


def test_fenced_files_go_live_in_order_while_the_apply_holds_the_lock(tmp_path, holder):
    _, token = holder
    owner, group = _owner()
    script, unit = tmp_path / "lib" / "check-x", tmp_path / "etc" / "x.conf"
    marker = str(tmp_path / "pending" / "x.service.restart")
    files = (operations.FileSpec(str(script), "#!/bin/sh\nexit 0\n", "0755", owner, group, validate="sh -n {path}"),
             # This check needs the script before it live, and ends with `exit 0` (as vLLM's unit check does):
             # the renames after it must still run.
             operations.FileSpec(str(unit), "x=1\n", "0640", owner, group, validate=f"{script} && exit 0",
                                 pending=(marker,)))
    done = _run_locally(operations.managed_files, files=files, current=dict.fromkeys(map(str, (script, unit))),
                        fence=token)
    assert done.returncode == 0, done.stderr
    assert script.read_text() == "#!/bin/sh\nexit 0\n" and unit.read_text() == "x=1\n"
    assert oct(unit.stat().st_mode & 0o777) == "0o640"
    assert (tmp_path / "pending" / "x.service.restart").exists()
    assert not list(tmp_path.glob("*/.sparkguard-stage"))


def test_a_check_still_running_when_the_apply_died_renames_nothing(tmp_path, holder):
    """The apply's connection ended (the holder read end of file and exited): its command, still running on the
    node, finds the holder gone and leaves the live file as it was, for the next apply to clean up."""
    process, token = holder
    owner, group = _owner()
    live = tmp_path / "etc" / "x.conf"
    live.parent.mkdir()
    live.write_text("old\n")
    process.stdin.close()
    process.wait(timeout=10)
    files = (operations.FileSpec(str(live), "new\n", "0644", owner, group, validate="true"),)
    done = _run_locally(operations.managed_files, files=files, current={str(live): None}, fence=token)
    assert done.returncode == 75 and "no longer holds the node's lock" in done.stderr
    assert live.read_text() == "old\n"


def test_a_failed_check_leaves_the_live_file_and_no_stage(tmp_path, holder):
    _, token = holder
    owner, group = _owner()
    live = tmp_path / "etc" / "x.conf"
    live.parent.mkdir()
    live.write_text("old\n")
    files = (operations.FileSpec(str(live), "broken\n", "0644", owner, group, validate="grep -qx ok {path}"),)
    done = _run_locally(operations.managed_files, files=files, current={str(live): None}, fence=token)
    assert done.returncode == 1 and f"validation failed for {live}" in done.stderr
    assert live.read_text() == "old\n" and not (live.parent / ".sparkguard-stage").exists()
