"""Role recovery and `sparkguard audit` on their own bookworm node (127.0.81.x).

Fresh node: audit is red (exit 1). Apply: the second apply changes nothing, the
recovery files and units are in place, journald writes to /var/log/journal. Audit
is then green (exit 0) in one SSH command. Drift by hand: audit names it.

This CI host's kernel has no CONFIG_MAGIC_SYSRQ, so kernel.sysrq is left unmanaged
here (the validator would refuse it) and kernel.panic is managed instead.
"""

from __future__ import annotations

import json

import pytest

from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.recovery import state as rs
from sparkguard.run.runner import run_deploy
from tests.conftest import run_cli
from tests.sandbox.conftest import booted_sandbox, net

pytestmark = pytest.mark.sandbox
RECOVERY_VARS = "    recovery: {sysctl: {sysrq: null, panic_reboot_s: 30}}\n"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with booted_sandbox(tmp_path_factory, "bookworm", net("127.0.81"), 1) as handle:
        yield handle


@pytest.fixture(scope="module")
def inventory(node, tmp_path_factory):
    return node.inventory_with(tmp_path_factory.mktemp("recovery-inv"), extra_all_vars=RECOVERY_VARS)


def audit(inventory) -> tuple[int, dict]:
    result = run_cli("audit", str(inventory), "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["hosts"][0]["checks"]}


def failing(report: dict) -> list[str]:
    return [c["name"] for c in report["hosts"][0]["checks"] if not c["ok"]]


def test_fresh_node_audits_red_then_apply_makes_it_green(node, inventory):
    rc, before = audit(inventory)
    assert rc == 1 and before["ssh_commands_per_host"] == 1
    red = failing(before)
    assert {"earlyoom: packages", "earlyoom: running", "recovery: files",
            "recovery: systemd watchdog live (RuntimeWatchdogSec=60s, RebootWatchdogSec=600s)"} <= set(red), red

    first = run_deploy(load_inventory(inventory), site_deploy)
    assert first.ok, json.dumps(first.as_dict(), indent=1, default=str)
    second = run_deploy(load_inventory(inventory), site_deploy)
    assert second.ok and second.changed == 0, second.hosts[0].changed_names

    rc, after = audit(inventory)
    assert rc == 0, failing(after)
    seen = checks(after)
    assert "container" in seen["recovery: watchdog armed"]["actual"]
    assert "kernel refused" in seen["sshd: listener oom_score_adj"]["actual"]


def test_recovery_pieces_are_live(node, inventory):
    run_deploy(load_inventory(inventory), site_deploy)
    for path in (rs.WATCHDOG_CONF, rs.JOURNALD_CONF, rs.SSH_DROPIN, rs.JOURNALD_DROPIN, rs.SLICE_DROPIN,
                 rs.SYSCTL_FILE, rs.BOOT_REPORT):
        assert node.ssh("node-1", f"test -f {path}")[0] == 0, path
    rc, out, _ = node.ssh("node-1", "systemctl show -p RuntimeWatchdogUSec -p RebootWatchdogUSec")
    assert "RuntimeWatchdogUSec=1min" in out and "RebootWatchdogUSec=10min" in out
    # journald took the drop-in: its live journal file is on disk
    rc, out, _ = node.ssh("node-1", "journalctl --header | grep 'File path'")
    assert "/var/log/journal/" in out, out
    rc, out, _ = node.ssh("node-1", "systemctl show -p MemoryMin -p MemoryLow ssh.service; "
                                    "systemctl show -p OOMScoreAdjust ssh.service")
    assert "MemoryMin=33554432" in out and "MemoryLow=134217728" in out and "OOMScoreAdjust=-1000" not in out
    assert node.ssh("node-1", "systemctl is-active sparkguard-boot-report.service")[1].strip() == "active"
    assert "sparkguard_previous_boot_unclean 0" in node.ssh("node-1", f"cat {rs.BOOT_TEXTFILE}")[1]


def test_boot_report_detects_a_leftover_marker(node, inventory):
    """A boot that never ran ExecStop leaves the marker: the next start reports it (simulated in place)."""
    loaded = load_inventory(inventory)
    run_deploy(loaded, site_deploy)
    args = rs.boot_report_args(loaded.hosts[0].config.recovery.boot_report)  # what its unit passes
    rc, out, err = node.ssh("node-1", f"rm -f {rs.BOOT_VERDICT} && test -f {rs.BOOT_MARKER} && "
                                      f"{rs.BOOT_REPORT} start {args} && cat {rs.BOOT_TEXTFILE} {rs.LAST_UNCLEAN}")
    assert rc == 0, err
    assert "sparkguard_previous_boot_unclean 1" in out and "previous boot ended uncleanly" in out
    journal = node.ssh("node-1", "journalctl -t sparkguard-boot-report --no-pager")[1]
    assert "previous boot ended uncleanly" in journal
    # a restart of the unit in the same boot keeps the verdict
    node.ssh("node-1", "systemctl restart sparkguard-boot-report.service")
    assert "sparkguard_previous_boot_unclean 1" in node.ssh("node-1", f"cat {rs.BOOT_TEXTFILE}")[1]
    rc, report = audit(inventory)
    assert "UNCLEANLY" in checks(report)["recovery: boot report"]["actual"]
    node.ssh("node-1", f"echo 0 > {rs.BOOT_VERDICT}")


def test_audit_names_drift(node, inventory):
    run_deploy(load_inventory(inventory), site_deploy)
    assert audit(inventory)[0] == 0
    node.ssh("node-1", "sed -i 's/-m 8,4/-m 2,1/' /etc/default/earlyoom && systemctl restart earlyoom")
    rc, report = audit(inventory)
    assert rc == 1
    seen = checks(report)
    assert "/etc/default/earlyoom differs" in seen["earlyoom: files"]["actual"]
    assert not seen["earlyoom: args of the running process"]["ok"]
    assert "-m 2,1" in seen["earlyoom: args of the running process"]["actual"]
    node.ssh("node-1", "systemctl stop earlyoom")
    rc, report = audit(inventory)
    assert "inactive" in checks(report)["earlyoom: running"]["actual"]
    # apply repairs it; audit is green again
    assert run_deploy(load_inventory(inventory), site_deploy).ok
    rc, report = audit(inventory)
    assert rc == 0, failing(report)


RANKING = "earlyoom: GPU memory in the victim ranking"
RANKING_METRICS = "/var/lib/prometheus/node-exporter/sparkguard_gpu_ranking.prom"


def test_gpu_ranking_agent_state_is_audited_and_exported(node, inventory):
    """No nvidia-smi: green and said. A failing nvidia-smi or a stopped agent: red, and the metric says so."""
    import time

    assert run_deploy(load_inventory(inventory), site_deploy).ok
    rc, report = audit(inventory)
    assert rc == 0, failing(report)
    assert "no nvidia-smi" in checks(report)[RANKING]["actual"]
    try:
        # A driver that does not answer: the agent stays up, reports the error, earlyoom's names still decide.
        node.ssh("node-1", "printf '#!/bin/sh\\necho \"NVIDIA-SMI has failed because it could not communicate with "
                           "the NVIDIA driver\" >&2\\nexit 9\\n' > /usr/local/bin/nvidia-smi && "
                           "chmod 755 /usr/local/bin/nvidia-smi")
        time.sleep(5)
        rc, report = audit(inventory)
        row = checks(report)[RANKING]
        assert rc == 1 and not row["ok"] and "nvidia-smi exited 9" in row["actual"], row
        metrics = node.ssh("node-1", f"cat {RANKING_METRICS}")[1]
        assert "sparkguard_gpu_ranking_up 0" in metrics and "sparkguard_gpu_ranking_nvidia_smi 1" in metrics
        assert node.ssh("node-1", "systemctl is-active sparkguard-gpu-ranking")[1].strip() == "active"
    finally:
        node.ssh("node-1", "rm -f /usr/local/bin/nvidia-smi")
    # A stopped agent leaves a stale status: red.
    node.ssh("node-1", "systemctl stop sparkguard-gpu-ranking")
    node.ssh("node-1", "python3 -c \"import json; p='/run/sparkguard/gpu-ranking.json'; d=json.load(open(p)); "
                       "d['time'] -= 600; json.dump(d, open(p, 'w'))\"")
    rc, report = audit(inventory)
    assert rc == 1 and "old" in checks(report)[RANKING]["actual"]
    assert run_deploy(load_inventory(inventory), site_deploy).ok
    time.sleep(3)
    rc, report = audit(inventory)
    assert rc == 0, failing(report)
