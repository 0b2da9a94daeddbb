"""Faults during apply, on a real node (bookworm, 127.0.83.x): nothing half-written, nothing lost, the next apply converges.

The node runs earlyoom, swap, recovery and the monitoring stack (node_exporter + Prometheus). Two
inventories, A and B, differ in settings that change files of several roles (earlyoom's arguments:
restart; alert rules: reload; node.json). Every managed file on the node must always be exactly A's
or B's rendered version (old or new, never a mix), whatever happens to the apply:

- `sparkguard apply` SIGKILLed at 20 random moments (seeded, the seed is printed);
- its SSH connection dropped mid-run (the node's sshd session killed): the apply must say FAILED;
- its sshd session stopped mid-run (SIGSTOP: the connection open, nothing answering): the apply must
  end within seconds of SPARKGUARD_SSH_SILENCE_S, naming the node as not answering;
- the disk full where a file is about to be replaced: the live file stays as it was;
- two applies at once: the second refuses, naming the first, and changes nothing.

After each fault the next apply converges (exit 0), `sparkguard audit` is green (no pending restart,
no staged or uploaded file left: audit checks both) and no staging directory is anywhere on the node.
A fault table is printed at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SPARKGUARD, run_cli
from tests.reporting import report
from tests.sandbox.conftest import booted_sandbox, net, wait_for

NET = net("127.0.83")
KILLS = 20
SEED = int(os.environ.get("SPARKGUARD_FAULT_SEED", "0")) or random.SystemRandom().randrange(1, 10**6)
TABLE: dict[str, dict[str, int]] = {}


def variant(term: int, kill: int, warn_for: str, contact: str) -> str:
    return (
        f"    base: {{contact: '{contact}'}}\n"
        f"    earlyoom: {{term_percent: {term}, kill_percent: {kill}}}\n"
        "    monitoring:\n"
        "      enabled: true\n"
        "      alertmanager: {mode: none}\n"
        f"      alerts: {{overrides: {{warn_for: {warn_for}}}}}\n"
    )


@pytest.fixture(scope="module", autouse=True)
def fault_table():
    yield
    report(f"\nfault table (seed {SEED}): " + "; ".join(
        f"{kind}: {row['injected']} injected, {row['converged']} converged on the next apply, "
        f"{row['half_written']} files half-written, {row['lost']} files lost, {row['leftovers']} leftovers after"
        for kind, row in TABLE.items()))


def record(kind: str, **counts: int) -> None:
    row = TABLE.setdefault(kind, {"injected": 0, "converged": 0, "half_written": 0, "lost": 0, "leftovers": 0})
    for key, value in counts.items():
        row[key] += value


class Faults:
    """One node, inventories A and B, and what each of them renders (the only acceptable file contents)."""

    def __init__(self, handle, tmp: Path):
        self.handle = handle
        self.inventories = {
            "A": handle.inventory_with(tmp / "A", variant(10, 5, "5m", "A on-call")),
            "B": handle.inventory_with(tmp / "B", variant(12, 6, "7m", "B on-call")),
        }
        self.rendered: dict[str, dict[str, str]] = {}
        self.text: dict[str, dict[str, str]] = {}
        for name, inventory in self.inventories.items():
            out = tmp / f"render-{name}"
            result = run_cli("render", str(inventory), "--out", str(out))
            assert result.returncode == 0, result.stderr
            root = out / "node-1"
            self.rendered[name] = {"/" + str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                                   for p in root.rglob("*") if p.is_file()}
            self.text[name] = {"/" + str(p.relative_to(root)): p.read_text(errors="replace")[:3000]
                               for p in root.rglob("*") if p.is_file()}
        self.paths = sorted(set(self.rendered["A"]) | set(self.rendered["B"]))
        self.changing = [p for p in self.paths if self.rendered["A"].get(p) != self.rendered["B"].get(p)]

    def apply(self, name: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return run_cli("apply", str(self.inventories[name]), "--json", timeout=timeout)

    def start_apply(self, name: str) -> subprocess.Popen:
        return subprocess.Popen([*SPARKGUARD, "apply", str(self.inventories[name]), "--json"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def files_on_node(self) -> dict[str, str | None]:
        script = "for p in " + " ".join(self.paths) + "; do if [ -f \"$p\" ]; then sha256sum \"$p\"; " \
                 "else echo \"absent $p\"; fi; done"
        rc, out, err = self.handle.ssh("node-1", script)
        assert rc == 0, err
        seen = {}
        for line in out.splitlines():
            first, path = line.split(None, 1)
            seen[path] = None if first == "absent" else first
        return seen

    def judge_files(self, kind: str) -> None:
        """Every file is A's or B's version; a file both versions have is never missing."""
        seen = self.files_on_node()
        half = [p for p in self.paths if seen[p] is not None and seen[p] not in
                (self.rendered["A"].get(p), self.rendered["B"].get(p))]
        lost = [p for p in self.paths if seen[p] is None and p in self.rendered["A"] and p in self.rendered["B"]]
        record(kind, half_written=len(half), lost=len(lost))
        if half:
            shown = self.handle.ssh("node-1", f"head -c 3000 {half[0]}")[1]
            raise AssertionError(f"half-written {half} (lost {lost}); {half[0]} on the node:\n{shown}\n"
                                 f"A:\n{self.text['A'].get(half[0])}\nB:\n{self.text['B'].get(half[0])}")
        assert not lost, f"lost {lost}"

    def leftovers(self) -> list[str]:
        rc, out, _ = self.handle.ssh(
            "node-1", "find / -xdev \\( -name .sparkguard-stage -o -name .sparkguard-upload -o -name 'pyinfra-*' \\) "
                      "-print 2>/dev/null; ls -A /var/lib/sparkguard/pending 2>/dev/null")
        return out.split()

    def converge(self, kind: str, name: str, counted: bool = True) -> None:
        """The next apply after a fault: exit 0, the node is ``name``'s render, audit green, nothing left over."""
        result = self.apply(name)
        assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
        seen = self.files_on_node()
        assert all(seen[p] == self.rendered[name].get(p) for p in self.rendered[name]), \
            [p for p in self.rendered[name] if seen[p] != self.rendered[name][p]]
        audit = run_cli("audit", str(self.inventories[name]), "--json")
        assert audit.returncode == 0, [c for h in json.loads(audit.stdout)["hosts"] for c in h["checks"] if not c["ok"]]
        left = self.leftovers()
        record(kind, converged=int(counted), leftovers=len(left))
        assert left == [], left


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    with booted_sandbox(tmp_path_factory, "bookworm", NET, 1) as handle:
        box = Faults(handle, tmp_path_factory.mktemp("faults"))
        assert box.changing, "A and B must differ in some file"
        first = box.apply("A", timeout=900)
        assert first.returncode == 0, (first.stdout[-3000:], first.stderr[-3000:])
        yield box


def timed_apply(faults: Faults, name: str) -> float:
    started = time.monotonic()
    result = faults.apply(name)
    assert result.returncode == 0, result.stderr[-2000:]
    return time.monotonic() - started


def test_apply_killed_at_random_moments_never_leaves_a_half_written_file(faults):
    span = max(timed_apply(faults, "B"), timed_apply(faults, "A"))
    rng = random.Random(SEED)
    target = "B"
    for _ in range(KILLS):
        delay = rng.uniform(0.2, span)
        process = faults.start_apply(target)
        time.sleep(delay)
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=30)
        record("apply killed (SIGKILL)", injected=1)
        faults.judge_files("apply killed (SIGKILL)")
        # Half of the time the next apply goes on to the same target, half of the time back to the other.
        if rng.random() < 0.5:
            target = "A" if target == "B" else "B"
        faults.converge("apply killed (SIGKILL)", target)
        target = "A" if target == "B" else "B"


def test_dropped_connection_is_a_failed_apply_and_the_next_one_converges(faults):
    # From A to B there is work to cut into (restarts, reloads); a no-op apply is over in a second.
    assert faults.apply("A").returncode == 0
    process = faults.start_apply("B")
    # Wait until the apply holds the node's lock (it is connected and reading the node), then cut it off.
    wait_for(lambda: faults.handle.ssh("node-1", "flock -n /run/sparkguard-apply.lock true")[0] != 0,
             timeout=60, what="the apply to take the node's lock")
    time.sleep(0.5)
    assert process.poll() is None, "the apply ended before its connection could be dropped: no fault injected"
    # Every SSH session but this one's own (its sshd is this shell's parent).
    faults.handle.ssh("node-1", "for p in $(pgrep -f '^sshd: root@notty'); do [ \"$p\" = \"$PPID\" ] || kill -KILL \"$p\"; done")
    out, err = process.communicate(timeout=300)
    record("SSH connection dropped", injected=1)
    assert process.returncode != 0, out[-2000:]
    assert "Traceback" not in err, err[-3000:]
    # The report is there whatever the cut interrupted (a command, the opening of the next one, a file upload),
    # and it says first that the connection ended (sparkguard.run.connection).
    report = json.loads(out)
    (host,) = report["hosts"]
    assert not report["ok"] and not host["ok"]
    assert host["errors"][0].startswith("the SSH connection to the node ended during the run ("), host["errors"]
    faults.judge_files("SSH connection dropped")
    faults.converge("SSH connection dropped", "B")


def test_a_node_whose_sshd_stops_answering_fails_the_apply_naming_it_instead_of_hanging(faults, monkeypatch):
    """The apply's sshd session is stopped (SIGSTOP): the connection stays open, the node's kernel
    acknowledges every packet, and nothing answers; as on a node thrashing under memory pressure."""
    assert faults.apply("A").returncode == 0
    monkeypatch.setenv("SPARKGUARD_SSH_SILENCE_S", "5")
    process = faults.start_apply("B")
    wait_for(lambda: faults.handle.ssh("node-1", "flock -n /run/sparkguard-apply.lock true")[0] != 0,
             timeout=60, what="the apply to take the node's lock")
    time.sleep(0.5)
    assert process.poll() is None, "the apply ended before its sshd could be stopped: no fault injected"
    others = "for p in $(pgrep -f '^sshd: root@notty'); do [ \"$p\" = \"$PPID\" ] || kill -{} \"$p\"; done"
    faults.handle.ssh("node-1", others.format("STOP"))
    stopped = time.monotonic()
    try:
        out, err = process.communicate(timeout=120)
    finally:
        faults.handle.ssh("node-1", others.format("KILL"))  # what a stopped session would do once it woke: go
    took = time.monotonic() - stopped
    record("sshd stopped answering", injected=1)
    assert process.returncode == 1, (process.returncode, out[-2000:], err[-2000:])
    report = json.loads(out)
    errors = report["hosts"][0]["errors"]
    assert errors[0].startswith("the node stopped answering SSH: a liveness request went unanswered for 5 s"), errors
    assert "Traceback" not in err
    print(f"sshd stopped: the apply ended {took:.1f} s later")
    faults.judge_files("sshd stopped answering")
    # Still with a 5 s silence, so a request every 1.7 s: the node's real sshd answers them (a refusal,
    # which is an answer) and the apply goes through.
    faults.converge("sshd stopped answering", "B")


def test_full_disk_before_replace_keeps_the_live_file(faults):
    """/etc/sparkguard on a full 1 MiB tmpfs: node.json cannot be staged, so the live one must stay A's."""
    assert faults.apply("A").returncode == 0
    node_json = "/etc/sparkguard/node.json"
    assert node_json in faults.changing
    setup = ("set -e; cp -a /etc/sparkguard /root/sg-etc-copy; mount -t tmpfs -o size=1m,mode=0755 sg-full /etc/sparkguard; "
             "cp -a /root/sg-etc-copy/. /etc/sparkguard/; dd if=/dev/zero of=/etc/sparkguard/filler bs=4k 2>/dev/null || true")
    rc, _, err = faults.handle.ssh("node-1", setup)
    assert rc == 0, err
    try:
        before = faults.files_on_node()[node_json]
        result = faults.apply("B")
        record("disk full before replace", injected=1)
        assert result.returncode == 1, result.stdout[-2000:]
        report = json.loads(result.stdout)
        errors = " ".join(e for h in report["hosts"] for e in h["errors"])
        assert node_json in errors, errors
        assert faults.files_on_node()[node_json] == before == faults.rendered["A"][node_json]
        faults.judge_files("disk full before replace")
    finally:
        faults.handle.ssh("node-1", "rm -f /etc/sparkguard/filler")
    # Space is back: the same apply now goes through, leaving nothing staged in the full directory.
    faults.converge("disk full before replace", "B")
    rc, _, err = faults.handle.ssh("node-1", "umount /etc/sparkguard && rm -rf /root/sg-etc-copy")
    assert rc == 0, err
    faults.converge("disk full before replace", "B", counted=False)  # the directory under the tmpfs, too


def test_second_concurrent_apply_refuses_naming_the_first(faults, monkeypatch):
    first = faults.start_apply("A")
    monkeypatch.setenv("SPARKGUARD_LOCK_WAIT_S", "0")  # refuse at once, however soon the first one ends
    wait_for(lambda: faults.handle.ssh("node-1", "flock -n /run/sparkguard-apply.lock true")[0] != 0,
             timeout=60, what="the first apply to take the node's lock")
    second = faults.apply("B")
    record("two applies at once", injected=1)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 4, second.stdout[-2000:]
    assert "another apply is running on this node: sparkguard apply by" in second.stderr, second.stderr
    assert "Nothing was applied to any node; apply again once it is done." in second.stderr, second.stderr
    assert "Traceback" not in second.stderr
    faults.judge_files("two applies at once")
    seen = faults.files_on_node()
    assert all(seen[p] == faults.rendered["A"].get(p) for p in faults.rendered["A"]), "the refused apply changed files"
    faults.converge("two applies at once", "B")


def test_a_restart_left_pending_runs_on_the_next_apply(faults):
    """What a kill between a file going live and its restart leaves: the next apply restarts, once."""
    assert faults.apply("B").returncode == 0
    pid = faults.handle.ssh("node-1", "systemctl show -p MainPID --value earlyoom.service")[1].strip()
    rc, _, err = faults.handle.ssh("node-1", "touch /var/lib/sparkguard/pending/earlyoom.service.restart")
    assert rc == 0, err
    record("restart left pending", injected=1)
    audit = run_cli("audit", str(faults.inventories["B"]), "--json")
    assert audit.returncode == 1
    failed = [c for h in json.loads(audit.stdout)["hosts"] for c in h["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["apply: nothing left half-done"], failed
    assert "pending:earlyoom.service.restart" in failed[0]["actual"]
    result = json.loads(faults.apply("B").stdout)
    changed = result["hosts"][0]["changed_operations"]
    assert result["ok"] and [name.split(" | ")[-1] for name in changed] == [
        "earlyoom: restart earlyoom.service (config changed)"], changed
    assert faults.handle.ssh("node-1", "systemctl show -p MainPID --value earlyoom.service")[1].strip() != pid
    again = json.loads(faults.apply("B").stdout)
    assert again["ok"] and again["hosts"][0]["changed"] == 0, again["hosts"][0]["changed_operations"]
    faults.converge("restart left pending", "B")
