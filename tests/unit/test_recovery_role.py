"""Role recovery, offline: every piece switchable, safe defaults, no sshd OOM trap, checks."""

from __future__ import annotations

import pytest

from sparkguard.engine.render import host_states
from sparkguard.errors import ConfigError
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.recovery import state as rs

BASE = "all:\n  vars:\n    node: {{memory_total_gib: 121.7}}\n    recovery: {recovery}\n  hosts:\n    h: {{ssh_host: 192.0.2.1}}\n"


def recovery_state(inventory_dir, recovery="{}"):
    entry = load_inventory(inventory_dir(BASE.format(recovery=recovery))).host("h")
    return next(s for s in host_states(entry) if s.role == "recovery")


def test_defaults_install_every_piece(inventory_dir):
    state = recovery_state(inventory_dir)
    paths = {f.path for f in state.files}
    assert {rs.WATCHDOG_CONF, rs.JOURNALD_CONF, rs.SSH_DROPIN, rs.JOURNALD_DROPIN, rs.SLICE_DROPIN,
            rs.SYSCTL_FILE, rs.BOOT_REPORT} <= paths
    watchdog = state.file(rs.WATCHDOG_CONF).content
    assert "RuntimeWatchdogSec=60s" in watchdog and "RebootWatchdogSec=600s" in watchdog
    journald = state.file(rs.JOURNALD_CONF).content
    assert "Storage=persistent" in journald and "SystemMaxUse=2048M" in journald
    assert state.sysctls == {"kernel.sysrq": "240"}  # panics are opt-in
    assert state.file(rs.SYSCTL_FILE).validate.startswith("/usr/local/lib/sparkguard/sysctl-check")
    # journald restarts only when its drop-in changed
    journald_service = next(s for s in state.services if s.name == "systemd-journald.service")
    assert journald_service.restart_on == (rs.JOURNALD_CONF,)
    # system.conf is reloaded by re-exec, gated on PID 1's live values
    reexec = next(e for e in state.ensures if e.fix == "systemctl daemon-reexec")
    assert "t 60000000" in reexec.check and "t 600000000" in reexec.check


def test_ssh_is_protected_by_cgroup_memory_never_by_oom_score_adj(inventory_dir):
    state = recovery_state(inventory_dir)
    ssh = state.file(rs.SSH_DROPIN).content
    assert "MemoryMin=32M" in ssh and "MemoryLow=128M" in ssh
    # the parent slice must carry at least the children's protection, or theirs is void
    assert "MemoryMin=96M" in state.file(rs.SLICE_DROPIN).content
    assert "[Slice]" in state.file(rs.SLICE_DROPIN).content
    for managed in state.files:
        assert "OOMScoreAdjust=" not in "\n".join(
            line for line in managed.content.splitlines() if not line.startswith("#"))


def test_each_piece_can_be_switched_off(inventory_dir):
    state = recovery_state(inventory_dir, "{watchdog: {enabled: false}, journal: {enabled: false}, "
                                          "memory_protection: {enabled: false}, sysctl: {enabled: false}, "
                                          "boot_report: {enabled: false}}")
    assert state.files == () and state.services == () and state.ensures == () and state.sysctls == {}
    entry = load_inventory(inventory_dir(BASE.format(recovery="{enabled: false}"))).host("h")
    assert "recovery" not in {s.role for s in host_states(entry)}


def test_opt_in_panics_and_unmanaged_sysrq(inventory_dir):
    state = recovery_state(inventory_dir, "{sysctl: {sysrq: null, panic_reboot_s: 10, panic_on_oops: true, "
                                          "hung_task_panic: true}}")
    assert state.sysctls == {"kernel.panic": "10", "kernel.panic_on_oops": "1", "kernel.hung_task_panic": "1"}
    assert "kernel.panic = 10" in state.file(rs.SYSCTL_FILE).content


@pytest.mark.parametrize("field", ["panic_on_oops", "hung_task_panic"])
def test_a_panic_without_reboot_is_refused(inventory_dir, field):
    with pytest.raises(ConfigError) as error:
        recovery_state(inventory_dir, f"{{sysctl: {{{field}: true}}}}")
    assert f"recovery.sysctl.{field}" in str(error.value.paragraphs())


def test_boot_report_marker_and_metric(inventory_dir):
    state = recovery_state(inventory_dir)
    script = state.file(rs.BOOT_REPORT).content
    assert script == rs.BOOT_REPORT_SOURCE.read_text(), "shipped as it is"
    assert "sparkguard_previous_boot_unclean" in script and "journalctl -b -1 -u earlyoom.service" in script
    unit = state.file("/etc/systemd/system/sparkguard-boot-report.service").content
    assert f"ExecStop={rs.BOOT_REPORT} stop --marker {rs.BOOT_MARKER}" in unit and "RemainAfterExit=yes" in unit
