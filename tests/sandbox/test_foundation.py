"""The foundation end to end: real deploy, real SSH (paramiko), real systemd nodes."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import paramiko
import yaml
from paramiko.common import MSG_CHANNEL_EOF

from sparkguard.dev import sandbox
from sparkguard.engine.converge import site_deploy
from sparkguard.engine.operations import managed_file
from sparkguard.engine.render import render_inventory
from sparkguard.inventory.loader import load_inventory
from sparkguard.run import channel_eof
from sparkguard.run.runner import run_deploy
from tests import ssh_stub
from tests.conftest import REPO, run_cli
from tests.roundtrips import counting
from tests.sandbox.conftest import NET
from tests.wheel import build_wheel, install

NODES = ("node-1", "node-2")


def apply(inventory_dir: Path, factory=site_deploy):
    return run_deploy(load_inventory(inventory_dir), factory)


def test_apply_site_to_two_nodes_then_second_apply_changes_nothing(sandbox_nodes):
    first = apply(sandbox_nodes.inventory_dir)
    assert first.ok, json.dumps(first.as_dict(), indent=1, default=str)
    assert [h.host for h in first.hosts] == list(NODES)

    with counting() as trips:
        second = apply(sandbox_nodes.inventory_dir)
    assert second.ok, json.dumps(second.as_dict(), indent=1, default=str)
    assert second.changed == 0, [h.changed_names for h in second.hosts]
    assert all(h.operations > 0 for h in second.hosts)
    # A no-op apply reads each node once (the snapshot) besides taking its lock: at most 3 round trips per
    # host (the target; 2 today), however many roles, files and services there are.
    per_node = {name: trips[sandbox_nodes.node(name).address] for name in NODES}
    print(f"no-op apply: SSH round trips per host after connecting: {per_node}")
    assert all(0 < count <= 3 for count in per_node.values()), per_node


def test_node_state_is_byte_identical_to_render(sandbox_nodes, tmp_path):
    apply(sandbox_nodes.inventory_dir)
    render_inventory(load_inventory(sandbox_nodes.inventory_dir), tmp_path)
    for node in NODES:
        rendered = (tmp_path / node / "etc/sparkguard/node.json").read_text()
        rc, out, _ = sandbox_nodes.ssh(node, "cat /etc/sparkguard/node.json; stat -c '%a %U %G' /etc/sparkguard/node.json"
                                       " /var/lib/sparkguard; ls -A /etc/sparkguard")
        assert rc == 0
        content, _, meta = out.partition("\n}\n")
        assert content + "\n}\n" == rendered
        # Nothing in /etc/sparkguard but what the render has (node.json, the ranking agent's config, ...).
        managed = sorted(p.name for p in (tmp_path / node / "etc/sparkguard").iterdir())
        assert "node.json" in managed
        assert meta.splitlines() == ["644 root root", "755 root root", *managed]


def test_plain_pyinfra_cli_applies_site(sandbox_nodes):
    result = subprocess.run(
        [str(Path(sys.executable).parent / "pyinfra"), "-y", "--json",
         str(sandbox_nodes.inventory_dir / "inventory.py"), "deploy/site.py"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    payload = json.loads(result.stdout[result.stdout.index("{"):])
    operations = payload["results"]["operations"]
    assert operations and all(op["error"] == [] for op in operations)
    assert all(op["success"] == [] for op in operations), "site was already applied: pyinfra must change nothing"


TEAM_DEPLOY = """
from sparkguard.deploys import earlyoom

earlyoom(settings={settings!r}, node={{"memory_total_gib": {memtotal}}})
"""


def test_a_teams_own_pyinfra_deploy_applies_one_role(sandbox_nodes, tmp_path):
    """sparkguard.deploys from a plain pyinfra deploy and inventory in an unrelated directory: the role lands
    with the given settings, a rerun changes nothing, and a bad value stops with the inventory's paragraph."""
    node = sandbox_nodes.node("node-1")
    memtotal = load_inventory(sandbox_nodes.inventory_dir).host("node-1").config.node.memory_total_gib
    (tmp_path / "inventory.py").write_text(
        f"hosts = [({node.address!r}, {{'ssh_user': 'root', 'ssh_key': {str(sandbox_nodes.key)!r}, "
        f"'ssh_known_hosts_file': {str(sandbox_nodes.known_hosts)!r}, 'ssh_strict_host_key_checking': 'yes'}})]\n")
    pyinfra = str(Path(sys.executable).parent / "pyinfra")

    def run(settings: dict) -> subprocess.CompletedProcess:
        (tmp_path / "team_deploy.py").write_text(TEAM_DEPLOY.format(settings=settings, memtotal=memtotal))
        return subprocess.run([pyinfra, "-y", "--json", "inventory.py", "team_deploy.py"], capture_output=True,
                              text=True, cwd=tmp_path, timeout=300)

    try:
        first = run({"term_percent": 9, "kill_percent": 3})
        assert first.returncode == 0, first.stderr[-3000:]
        rc, out, _ = sandbox_nodes.ssh("node-1", "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value earlyoom)/cmdline")
        assert " -m 9,3 " in out, out
        again = run({"term_percent": 9, "kill_percent": 3})
        operations = json.loads(again.stdout[again.stdout.index("{"):])["results"]["operations"]
        assert again.returncode == 0 and operations and all(op["success"] == [] for op in operations)

        bad = run({"term_percent": 200})
        assert bad.returncode != 0
        assert "field 'earlyoom.term_percent' = 200" in bad.stderr + bad.stdout
        rc, out, _ = sandbox_nodes.ssh("node-1", "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value earlyoom)/cmdline")
        assert " -m 9,3 " in out, "a refused deploy changed the node"
    finally:
        assert apply(sandbox_nodes.inventory_dir).ok  # the site's own state again, for the tests after this one


def test_dry_diff_shows_a_hand_edit_and_never_a_secret(sandbox_nodes):
    """apply --dry --diff: a hand edit on one node shows as a unified diff against what apply would write,
    the other node shows none, nothing changes; a secret file that differs is named, its content never shown."""
    assert apply(sandbox_nodes.inventory_dir).ok
    sandbox_nodes.ssh("node-1", "sed -i 's/-m 8,4/-m 7,3/' /etc/default/earlyoom")
    done = run_cli("apply", str(sandbox_nodes.inventory_dir), "--dry", "--diff", "--json")
    assert done.returncode == 0, done.stderr
    hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
    (earlyoom,) = [d for d in hosts["node-1"]["diffs"] if "/etc/default/earlyoom (node)" in d]
    assert '-EARLYOOM_ARGS="-m 7,3' in earlyoom and '+EARLYOOM_ARGS="-m 8,4' in earlyoom
    assert "sparkguard site | earlyoom: files /etc/default/earlyoom" in hosts["node-1"]["changed_operations"]
    assert hosts["node-2"]["diffs"] == []
    assert "-m 7,3" in sandbox_nodes.ssh("node-1", "cat /etc/default/earlyoom")[1]  # a dry run changes nothing
    assert apply(sandbox_nodes.inventory_dir).ok

    path = "/etc/sparkguard-diff-test.env"
    sandbox_nodes.ssh("node-1", f"printf 'TOKEN=old-s3cret\\n' > {path}; chmod 600 {path}")

    def secret_file():
        from pyinfra.api import deploy

        from sparkguard.engine.converge import converge
        from sparkguard.state import DesiredState, ManagedFile

        @deploy("secret file test")
        def run():
            converge(DesiredState(role="test", files=(ManagedFile(path, "TOKEN=new-s3cret\n", mode="0600", secret=True),)))
        return run

    try:
        result = run_deploy(load_inventory(sandbox_nodes.inventory_dir), secret_file, dry=True, diff=True)
        text = json.dumps(result.as_dict())
        node1 = next(h for h in result.hosts if h.host == "node-1")
        assert node1.diffs == [f"--- {path}: secret file differs; its content is not shown\n"]
        assert "s3cret" not in text
    finally:
        sandbox_nodes.ssh("node-1", f"rm -f {path}")


def _fleet_with_a_dead_node_first(sandbox_nodes, directory: Path, contact: str) -> Path:
    """The sandbox inventory with 'ghost' (nothing listens on its address) ordered before the two nodes."""
    document = yaml.safe_load((sandbox_nodes.inventory_dir / "hosts.yml").read_text())
    group = document["all"]["children"]["sandbox"]
    group["hosts"] = {"ghost": {"ssh_host": f"{NET}.99"}, **group["hosts"]}
    document["all"]["vars"].setdefault("base", {})["contact"] = contact
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    return directory


def test_rolling_apply_stops_skips_and_leaves_a_retry_file(sandbox_nodes, tmp_path):
    """--serial stops after a failed batch (the rest untouched, reported FAILED, in the retry file);
    --max-fail-percent lets it go on; --skip-unreachable applies to the nodes that answer; progress lines."""
    retry = tmp_path / "site.retry"
    try:
        inventory = _fleet_with_a_dead_node_first(sandbox_nodes, tmp_path / "a", "rollout-a")
        done = run_cli("apply", str(inventory), "--serial", "1", "--retry-file", str(retry), "--json")
        assert done.returncode == 1, done.stderr
        hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
        assert not any(h["ok"] for h in hosts.values())
        assert "cannot reach" in hosts["ghost"]["errors"][0]
        assert "batch 1 of 3 failed" in hosts["node-1"]["errors"][0] and "batch 1 of 3" in hosts["node-2"]["errors"][0]
        assert [_contact_on(sandbox_nodes, n) for n in NODES] != ["rollout-a"] * 2
        assert "rollout-a" not in {_contact_on(sandbox_nodes, n) for n in NODES}
        assert retry.read_text().splitlines()[1:] == ["ghost", "node-1", "node-2"]

        inventory = _fleet_with_a_dead_node_first(sandbox_nodes, tmp_path / "b", "rollout-b")
        done = run_cli("apply", str(inventory), "--limit", f"@{retry}", "--serial", "2", "--max-fail-percent", "50",
                       "--skip-unreachable", "--retry-file", str(retry), "--progress")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "batch 1/2: ghost, node-1" in done.stderr and "batch 2/2: node-2" in done.stderr
        assert "node-1 [" in done.stderr and "changed: sparkguard site | base: files /etc/sparkguard/node.json" in done.stderr
        assert [_contact_on(sandbox_nodes, n) for n in NODES] == ["rollout-b"] * 2
        assert retry.read_text().splitlines()[1:] == ["ghost"]

        inventory = _fleet_with_a_dead_node_first(sandbox_nodes, tmp_path / "c", "rollout-c")
        done = run_cli("apply", str(inventory), "--skip-unreachable", "--retry-file", str(retry), "--json")
        hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
        assert done.returncode == 1 and hosts["node-1"]["ok"] and hosts["node-2"]["ok"] and not hosts["ghost"]["ok"]
        assert "unreachable, skipped (--skip-unreachable)" in hosts["ghost"]["errors"][0]
        assert [_contact_on(sandbox_nodes, n) for n in NODES] == ["rollout-c"] * 2
        assert retry.read_text().splitlines()[1:] == ["ghost"]
    finally:
        assert apply(sandbox_nodes.inventory_dir).ok


def test_the_installed_wheel_applies_and_audits_from_an_unrelated_directory(sandbox_nodes, tmp_path):
    """pip install of the built wheel into a fresh venv (no checkout on its path), then apply and audit the
    sandbox nodes from another directory: the same state (no change), every check green."""
    bin_dir = install(build_wheel(tmp_path / "build"), tmp_path / "venv")
    elsewhere = tmp_path / "ops-repo"
    shutil.copytree(sandbox_nodes.inventory_dir, elsewhere / "inventory" / "lab")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(bin_dir / "sparkguard"), *args], cwd=elsewhere, capture_output=True, text=True,
                              timeout=600, env=env)

    assert apply(sandbox_nodes.inventory_dir).ok
    applied = run("apply", "inventory/lab", "--json")
    assert applied.returncode == 0, applied.stderr[-3000:]
    result = json.loads(applied.stdout)
    assert result["ok"] and result["changed"] == 0, [h["changed_operations"] for h in result["hosts"]]
    audited = run("audit", "inventory/lab")
    assert audited.returncode == 0, audited.stdout[-3000:] + audited.stderr[-2000:]


def test_validate_before_replace_keeps_live_file(sandbox_nodes):
    path = "/etc/sparkguard-validate-test.conf"
    assert sandbox_nodes.ssh("node-1", f"printf 'ok live\\n' > {path}")[0] == 0

    def install(content):
        def factory():
            from pyinfra.api import deploy

            @deploy("validated file test")
            def run():
                managed_file(name="validated test file", path=path, content=content, validate="grep -q '^ok' {path}")
            return run
        return run_deploy(load_inventory(sandbox_nodes.inventory_dir), factory)

    broken = install("broken\n")
    node1 = next(h for h in broken.hosts if h.host == "node-1")
    assert not node1.ok
    assert any("validation failed" in e for e in node1.errors), node1.errors
    rc, out, _ = sandbox_nodes.ssh("node-1", f"cat {path}; ls -A /etc | grep -c sparkguard-stage || true")
    assert out.splitlines() == ["ok live", "0"]

    good = install("ok new\n")
    assert good.ok
    assert sandbox_nodes.ssh("node-1", f"cat {path} && rm -f {path}")[1] == "ok new\n"
    sandbox_nodes.ssh("node-2", f"rm -f {path}")


class _CountingListener:
    """A TCP listener that counts connection attempts (proves 'no SSH was attempted')."""

    def __init__(self, address: str):
        self.sock = socket.socket()
        self.sock.bind((address, 22))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def test_broken_inventory_exits_2_before_connecting(sandbox_nodes, tmp_path):
    listener = _CountingListener(f"{NET}.200")
    try:
        inventory = sandbox_nodes.inventory_with(
            tmp_path / "inv",
            extra_hosts=f"        trap:\n          ssh_host: {NET}.200\n          earlyoom_typo: 1\n")
        result = run_cli("apply", str(inventory))
    finally:
        listener.close()
    assert result.returncode == 2
    assert "host 'trap', field 'earlyoom_typo'" in result.stderr
    assert "Traceback" not in result.stderr
    assert listener.accepted == 0


def _contact_on(sandbox_nodes, node: str) -> str:
    return json.loads(sandbox_nodes.ssh(node, "cat /etc/sparkguard/node.json")[1])["settings"]["base"]["contact"]


def test_unreachable_host_clear_error_and_nothing_applied(sandbox_nodes, tmp_path):
    apply(sandbox_nodes.inventory_dir)
    inventory = sandbox_nodes.inventory_with(
        tmp_path / "inv", extra_all_vars="    base: {contact: must-not-land}\n",
        extra_hosts=f"        ghost:\n          ssh_host: {NET}.99\n")
    result = run_cli("apply", str(inventory))
    assert result.returncode == 4  # unreachable: nothing applied (README, exit codes)
    assert f"host 'ghost': cannot reach root@{NET}.99:22" in result.stderr
    assert "Nothing was applied to any node" in result.stderr
    assert "Traceback" not in result.stderr
    assert _contact_on(sandbox_nodes, "node-1") != "must-not-land"


def test_memory_declaration_checked_against_node(sandbox_nodes, tmp_path):
    text = (sandbox_nodes.inventory_dir / "hosts.yml").read_text()
    (tmp_path / "inv").mkdir()
    wrong = text.replace("memory_total_gib:", "memory_total_gib: 4.0 #")
    (tmp_path / "inv" / "hosts.yml").write_text(wrong.replace("    node:\n", "    base: {contact: must-not-land}\n    node:\n"))
    result = run_cli("apply", str(tmp_path / "inv"))
    assert result.returncode == 2, result.stderr
    assert "field 'node.memory_total_gib' = 4.0" in result.stderr and "more than 2%" in result.stderr
    assert _contact_on(sandbox_nodes, "node-1") != "must-not-land"


def test_sudo_user_applies_the_same_state(sandbox_nodes, tmp_path):
    apply(sandbox_nodes.inventory_dir)
    for name in NODES:  # the ops account can log in at all (if not, the error shows why, read as root)
        assert sandbox_nodes.ssh(name, "id -un", user="ops")[1].strip() == "ops"
    text = (sandbox_nodes.inventory_dir / "hosts.yml").read_text().replace("ssh_user: root", "ssh_user: ops\n    sudo: true")
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text(text)
    result = apply(tmp_path / "inv")
    assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
    assert result.changed == 0
    # A change under sudo uploads through the SSH user's private 0700 directory, never /tmp.
    count_tmp = "ls /tmp | grep -c '^pyinfra-' || true"
    before = sandbox_nodes.ssh("node-1", count_tmp)[1].strip()
    (tmp_path / "inv" / "hosts.yml").write_text(text.replace("    node:\n", "    base: {contact: via-sudo}\n    node:\n", 1))
    try:
        changed = apply(tmp_path / "inv")
        assert changed.ok and changed.changed >= 1, json.dumps(changed.as_dict(), indent=1, default=str)
        assert _contact_on(sandbox_nodes, "node-1") == "via-sudo"
        rc, out, err = sandbox_nodes.ssh("node-1", "stat -c '%a %U' ~ops/.sparkguard-upload; "
                                                   "ls -A ~ops/.sparkguard-upload; " + count_tmp)
        assert out.split() == ["700", "ops", before], repr((out, err, before))
    finally:
        assert apply(sandbox_nodes.inventory_dir).ok


def test_a_sudo_that_asks_for_a_password_is_named_and_nothing_is_applied(sandbox_nodes, tmp_path):
    """An operator account whose sudo rule wants a password: sparkguard says what to change, and touches nothing."""
    from sparkguard.run import node_lock

    text = (sandbox_nodes.inventory_dir / "hosts.yml").read_text().replace("ssh_user: root", "ssh_user: ops\n    sudo: true")
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text(text.replace("    node:\n", "    base: {contact: never-applied}\n    node:\n", 1))
    listing = "find /etc/sparkguard -printf '%p %s %T@\\n' | sort"
    before = sandbox_nodes.ssh("node-1", listing)[1]
    assert sandbox_nodes.ssh("node-1", "echo 'ops ALL=(ALL) ALL' > /etc/sudoers.d/ops")[0] == 0
    try:
        result = run_cli("apply", str(tmp_path / "inv"))
    finally:
        assert sandbox_nodes.ssh("node-1", "echo 'ops ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/ops")[0] == 0
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr
    assert ("host 'node-1': the node's apply lock /run/sparkguard-apply.lock could not be taken "
            "(exit 1: sudo: a password is required)" + node_lock.SUDO_HINT) in result.stderr, result.stderr
    assert result.stderr.rstrip().endswith("Nothing was applied to any node."), result.stderr
    assert sandbox_nodes.ssh("node-1", listing)[1] == before


def test_a_node_whose_logins_are_still_refused_is_not_handed_out(sandbox_nodes):
    """sandbox up's boot check: /run/nologin (what refused ops in one CI run) is caught, shown, and then gone."""
    import time

    import pytest

    box = sandbox.Sandbox.load(sandbox_nodes.state_dir)
    node = next(n for n in box.nodes if n.name == "node-2")
    assert sandbox_nodes.ssh("node-2", "echo maintenance > /run/nologin")[0] == 0
    try:
        with pytest.raises(sandbox.SandboxError, match="/run/nologin still refuses non-root logins") as refused:
            sandbox._wait_for_boot(box, node, time.time() + 30)
        assert "/run/nologin" in str(refused.value).split("the node says:")[1]
    finally:
        sandbox_nodes.ssh("node-2", "rm -f /run/nologin")
    sandbox._wait_for_boot(box, node, time.time() + 30)


def test_sandbox_status_and_idempotent_up(sandbox_nodes):
    result = run_cli("sandbox", "status", "--json", "--state-dir", str(sandbox_nodes.state_dir))
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(r["node"], r["running"], r["ssh"]) for r in rows] == [(n, True, True) for n in NODES]
    pids = [r["pid"] for r in rows]
    again = run_cli("sandbox", "up", "--nodes", "2", "--net", NET, "--state-dir", str(sandbox_nodes.state_dir),
                    "--inventory-dir", str(sandbox_nodes.inventory_dir))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1] == str(sandbox_nodes.inventory_dir)
    rows = json.loads(run_cli("sandbox", "status", "--json", "--state-dir", str(sandbox_nodes.state_dir)).stdout)
    assert [r["pid"] for r in rows] == pids


# Units that fail to start: one whose process says why, one whose process never runs (systemd alone says why).
FAILING_UNITS = {
    "sg-test-says-why.service": ("[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo \"bad config: line 3\" >&2; exit 1'\n",
                                 ["bad config: line 3", "status=1/FAILURE", "Result=exit-code"]),
    "sg-test-never-ran.service": ("[Service]\nType=oneshot\nLoadCredential=web.yml:/nonexistent/web.yml\n"
                                  "ExecStart=/bin/true\n", ["243/CREDENTIALS", "Result=exit-code"]),
}


def test_a_failed_restart_says_why_in_the_units_words_and_in_systemds(sandbox_nodes):
    """The restart command as the apply runs it, on a real node's systemd and journald."""
    from sparkguard.engine.operations import service_action
    from tests.unit.operations_harness import commands

    units = " ".join(FAILING_UNITS)
    for unit, (text, _) in FAILING_UNITS.items():
        rc, _, err = sandbox_nodes.ssh("node-2", f"printf %s {shlex.quote(text)} > /etc/systemd/system/{unit}")
        assert rc == 0, err
    try:
        assert sandbox_nodes.ssh("node-2", "systemctl daemon-reload")[0] == 0
        for unit, (_, why) in FAILING_UNITS.items():
            marker = f"/tmp/{unit}.restart"
            [command] = commands(service_action, unit, "restart", marker)
            rc, _, err = sandbox_nodes.ssh("node-2", f"touch {marker}; {command}")
            assert rc != 0, err
            assert err.splitlines()[0].startswith(f"Job for {unit} failed"), err
            for words in why:
                assert words in err, err
            assert sandbox_nodes.ssh("node-2", f"test -e {marker}")[0] == 0, "a failed restart stays pending"
    finally:
        sandbox_nodes.ssh("node-2", f"cd /etc/systemd/system && rm -f {units} && systemctl daemon-reload && "
                                    f"systemctl reset-failed {units}; rm -f /tmp/sg-test-*.restart")


def test_changed_host_key_after_reimage_is_refused_with_advice(sandbox_nodes, tmp_path):
    """Runs last in this module: it rekeys node-2, then applies the advised fix."""
    apply(sandbox_nodes.inventory_dir)
    rc, _, err = sandbox_nodes.ssh(
        "node-2", "rm -f /etc/ssh/ssh_host_ed25519_key* && ssh-keygen -q -t ed25519 -N '' "
                  "-f /etc/ssh/ssh_host_ed25519_key && (systemctl restart ssh &)")
    assert rc == 0, err
    import time
    time.sleep(1.5)
    inventory = sandbox_nodes.inventory_with(tmp_path / "inv", extra_all_vars="    base: {contact: must-not-land}\n")
    result = run_cli("apply", str(inventory))
    assert result.returncode == 4  # a changed host key: unreachable, nothing applied
    assert "host 'node-2'" in result.stderr and "has CHANGED" in result.stderr
    assert f"ssh-keygen -R '{NET}.2' -f {sandbox_nodes.known_hosts}" in result.stderr
    assert "Nothing was applied to any node" in result.stderr
    assert _contact_on(sandbox_nodes, "node-1") != "must-not-land"

    # The advised fix: drop the old key, learn the new one (here the test plays the console check).
    subprocess.run(["ssh-keygen", "-R", f"{NET}.2", "-f", str(sandbox_nodes.known_hosts)], check=True,
                   capture_output=True)
    key = (Path(sandbox_nodes.node("node-2").rootfs) / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    with sandbox_nodes.known_hosts.open("a") as handle:
        handle.write(f"{NET}.2 {key[0]} {key[1]}\n")
    assert apply(sandbox_nodes.inventory_dir).ok


CGROUP_PROBE_UNIT = "sparkguard-test-cgroup"


def cgroups_of(pids: list[int]) -> set[str]:
    """The cgroups of ``pids`` in the hierarchies systemd uses (v1 name=systemd, v2), as the host sees them."""
    found = set()
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue   # it ended meanwhile
        found |= {line for line in lines if line.startswith("0::") or ":name=systemd:" in line}
    return found


def test_each_node_has_cgroups_of_its_own_so_a_unit_on_two_nodes_never_shares_one(sandbox_nodes):
    """Two nodes run a unit of the same name: each node's view of the unit's cgroup holds its own process
    only (sparkguard/dev/node_cgroup.py). When every node shared one payload cgroup, node-2's process
    showed there as PID 0; stopping such a unit on one node failed to kill the cgroup ("Input/output
    error") and its restart failed with 219/CGROUP (Prometheus on the peers test's two nodes, 2026-12-07)."""
    seen_from_the_host = {node.name: cgroups_of(sandbox.node_processes(node.pid)) for node in sandbox_nodes.nodes}
    assert seen_from_the_host["node-1"] and seen_from_the_host["node-2"]
    assert seen_from_the_host["node-1"].isdisjoint(seen_from_the_host["node-2"]), seen_from_the_host
    try:
        for name in NODES:
            rc, _, err = sandbox_nodes.ssh(name, f"systemd-run --unit={CGROUP_PROBE_UNIT} sleep 300")
            assert rc == 0, err
        rc, out, err = sandbox_nodes.ssh(
            "node-1", f"cg=$(systemctl show -p ControlGroup --value {CGROUP_PROBE_UNIT}); "
                      "for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do "
                      "[ -f $h$cg/cgroup.procs ] && sed \"s|^|$h |\" $h$cg/cgroup.procs; done; "
                      f"echo main $(systemctl show -p MainPID --value {CGROUP_PROBE_UNIT})")
        assert rc == 0, err
    finally:
        for name in NODES:
            sandbox_nodes.ssh(name, f"systemctl stop {CGROUP_PROBE_UNIT}")
    listed = [line.split() for line in out.splitlines()]
    main = listed.pop()[1]
    assert listed and {pid for _, pid in listed} == {main}, out


def still_answers(client: paramiko.SSHClient) -> bool:
    """Whether the node still answers on ``client``'s connection: a keepalive round trip, which ends
    early, or fails to be written, where the node has ended the connection."""
    transport = client.get_transport()
    try:
        assert transport is not None
        transport.global_request("keepalive@openssh.com", wait=True)
    except (EOFError, OSError):
        return False
    return transport.is_active()


def sshd_said(nodes, cursor: str, line: str, wait_s: float) -> str:
    """``line`` if node-1's sshd has logged it since ``cursor`` (waiting up to ``wait_s`` for it), else ''."""
    deadline = time.monotonic() + wait_s
    while True:
        said = nodes.ssh("node-1", f"journalctl -q -t sshd -o cat --after-cursor={shlex.quote(cursor)} | "
                                   f"grep -o {shlex.quote(line)} | sort -u")[1].strip()
        if said or time.monotonic() >= deadline:
            return said
        time.sleep(0.5)


LATE_EOF_S = 1    # how long an EOF sent under the channel's lock is held up (tests/ssh_stub.py late_eofs)
SSHD_LOG_WAIT_S = 10


def test_a_stdin_eof_sent_after_the_close_makes_sshd_end_the_connection_and_sparkguards_is_in_order(
        sandbox_nodes):
    """Real OpenSSH: an EOF for a channel it has closed ends the whole connection (the CI failure of
    2026-12-07, paramiko#1705). STAND-IN only for the scheduler: the thread closing a command's stdin is
    held up between building its EOF and sending it, and the command ends during that hold
    (tests/ssh_stub.py late_eofs)."""
    ends = {}
    for name, run in (("paramiko alone", paramiko.SSHClient.exec_command), ("channel_eof", channel_eof.exec_command)):
        cursor = sandbox_nodes.ssh("node-1", "journalctl -q -n 0 --show-cursor")[1].split("cursor:")[-1].strip()
        client = sandbox_nodes.connect("node-1")
        try:
            go = f"/run/sparkguard-test-eof-go-{len(ends)}"   # the command ends once it exists: during the hold
            sent = ssh_stub.late_eofs(client, LATE_EOF_S, partial(sandbox_nodes.ssh, "node-1", f"touch {go}"))
            stdin, stdout, _ = run(client, f"until [ -e {go} ]; do sleep 0.05; done; rm -f {go}")
            stdin.close()   # returns once the held-up EOF is out
            assert stdout.channel.recv_exit_status() == 0
            assert (MSG_CHANNEL_EOF, stdout.channel.remote_chanid) in sent
            ends[name] = "connected" if still_answers(client) else "ended"
        finally:
            client.close()
        ends[name + ", sshd"] = sshd_said(sandbox_nodes, cursor, "ieof packet referred to nonexistent channel",
                                          SSHD_LOG_WAIT_S if ends[name] == "ended" else 0)
    assert ends == {"paramiko alone": "ended", "paramiko alone, sshd": "ieof packet referred to nonexistent channel",
                    "channel_eof": "connected", "channel_eof, sshd": ""}, ends
