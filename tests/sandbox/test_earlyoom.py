"""Role earlyoom on real systemd nodes: installed, running with our lines, idempotent, validated."""

from __future__ import annotations

import json

from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy

EARLYOOM_PID = "systemctl show -p MainPID --value earlyoom"


def host_can_lower_oom_score_adj() -> bool:
    for line in open("/proc/self/status"):
        if line.startswith("CapBnd:"):
            return bool(int(line.split()[1], 16) & (1 << 24))  # CAP_SYS_RESOURCE
    return False


def apply(inventory_dir):
    return run_deploy(load_inventory(inventory_dir), site_deploy)


def cmdline(sandbox_nodes, node="node-1") -> list[str]:
    rc, out, _ = sandbox_nodes.ssh(node, f"tr '\\0' '\\n' < /proc/$({EARLYOOM_PID})/cmdline")
    assert rc == 0
    return out.splitlines()


def test_earlyoom_runs_with_unified_memory_lines_and_second_apply_is_clean(sandbox_nodes):
    first = apply(sandbox_nodes.inventory_dir)
    assert first.ok, json.dumps(first.as_dict(), indent=1, default=str)
    second = apply(sandbox_nodes.inventory_dir)
    assert second.changed == 0, [h.changed_names for h in second.hosts]
    for node in ("node-1", "node-2"):
        rc, out, _ = sandbox_nodes.ssh(node, "systemctl is-active earlyoom sparkguard-earlyoom-kills.path; "
                                             "systemctl is-enabled earlyoom sparkguard-earlyoom-kills.path")
        assert out.split() == ["active"] * 2 + ["enabled"] * 2, out
        args = cmdline(sandbox_nodes, node)
        assert args[1:7] == ["-m", "8,4", "-s", "100,100", "-r", "60"]
        assert args[args.index("--prefer") + 1].startswith("^(pt_elastic|")
        assert "-N" in args
        rc, out, _ = sandbox_nodes.ssh(node, "cat /var/lib/prometheus/node-exporter/sparkguard_earlyoom.prom")
        assert "sparkguard_earlyoom_kills_all_total 0" in out


def test_restarted_only_when_its_config_changed(sandbox_nodes, tmp_path):
    apply(sandbox_nodes.inventory_dir)
    pid = sandbox_nodes.ssh("node-1", EARLYOOM_PID)[1].strip()
    assert apply(sandbox_nodes.inventory_dir).changed == 0
    assert sandbox_nodes.ssh("node-1", EARLYOOM_PID)[1].strip() == pid

    changed = sandbox_nodes.inventory_with(tmp_path / "inv", extra_all_vars="    earlyoom: {term_percent: 9, kill_percent: 3}\n")
    result = apply(changed)
    assert result.ok
    assert sandbox_nodes.ssh("node-1", EARLYOOM_PID)[1].strip() != pid
    assert cmdline(sandbox_nodes)[1:3] == ["-m", "9,3"]
    apply(sandbox_nodes.inventory_dir)
    assert cmdline(sandbox_nodes)[1:3] == ["-m", "8,4"]


def test_args_earlyoom_rejects_never_replace_the_live_config(sandbox_nodes, tmp_path):
    """`(?i)` compiles in Python but not as a POSIX ERE: only earlyoom itself can tell."""
    apply(sandbox_nodes.inventory_dir)
    before = sandbox_nodes.ssh("node-1", "cat /etc/default/earlyoom")[1]
    pid = sandbox_nodes.ssh("node-1", EARLYOOM_PID)[1].strip()
    bad = sandbox_nodes.inventory_with(tmp_path / "inv", extra_all_vars="    earlyoom: {prefer_extra: ['(?i)trainer']}\n")
    result = apply(bad)
    assert not result.ok
    errors = " ".join(e for h in result.hosts for e in h.errors)
    assert "/etc/default/earlyoom" in errors and "validation failed" in errors
    assert sandbox_nodes.ssh("node-1", "cat /etc/default/earlyoom")[1] == before
    assert sandbox_nodes.ssh("node-1", EARLYOOM_PID)[1].strip() == pid
    assert sandbox_nodes.ssh("node-1", "systemctl is-active earlyoom")[1].strip() == "active"


def test_no_oom_score_adj_trap_on_ssh_and_oom_first_marks_the_job(sandbox_nodes):
    apply(sandbox_nodes.inventory_dir)
    rc, out, _ = sandbox_nodes.ssh("node-1", "systemctl show -p OOMScoreAdjust --value ssh.service; "
                                             "cat /proc/$(systemctl show -p MainPID --value ssh.service)/oom_score_adj; "
                                             "cat /proc/self/oom_score_adj; "
                                             "sparkguard-oom-first -- cat /proc/self/oom_score_adj; "
                                             "sparkguard-oom-first -- sh -c 'cat /proc/$$/oom_score_adj'")
    assert rc == 0
    unit_adjust, listener, session, job, child = out.split()
    assert unit_adjust == "0"      # no OOMScoreAdjust=-1000 drop-in on ssh.service
    # OpenSSH sets its listener to -1000, which needs CAP_SYS_RESOURCE; some CI hosts withhold it
    # from every process (the qemu VM tests check the real -1000).
    assert listener == ("-1000" if host_can_lower_oom_score_adj() else "0")
    assert session == "0"          # ...and restores 0 for every new session
    assert (job, child) == ("1000", "1000")


def test_oom_first_without_command_is_a_usage_error(sandbox_nodes):
    apply(sandbox_nodes.inventory_dir)
    rc, _, err = sandbox_nodes.ssh("node-1", "sparkguard-oom-first")
    assert rc == 2 and "usage" in err


def test_node_json_records_earlyoom_settings(sandbox_nodes):
    apply(sandbox_nodes.inventory_dir)
    document = json.loads(sandbox_nodes.ssh("node-1", "cat /etc/sparkguard/node.json")[1])
    assert document["settings"]["earlyoom"]["term_percent"] == 8.0


def test_systemd_oomd_is_not_left_running_as_a_second_guard(sandbox_nodes, tmp_path):
    """Ubuntu's desktop images (DGX OS) enable systemd-oomd: it kills whole user cgroups by memory pressure and
    ignores oom_score_adj. Installed and enabled before apply, it is stopped and masked by it; kept on request."""
    from sparkguard.audit.run import run_audit

    node = "node-2"
    ssh = lambda cmd: sandbox_nodes.ssh(node, cmd)[1].strip()  # noqa: E731
    apply(sandbox_nodes.inventory_dir)
    try:
        ssh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q systemd-oomd >/dev/null 2>&1; "
            "systemctl enable -q --now systemd-oomd.service; true")
        assert ssh("systemctl is-enabled systemd-oomd.service") == "enabled"
        result = apply(sandbox_nodes.inventory_dir)
        assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
        assert ssh("systemctl is-enabled systemd-oomd.service systemd-oomd.socket").split() == ["masked", "masked"]
        assert ssh("systemctl is-active systemd-oomd.service") != "active"
        assert apply(sandbox_nodes.inventory_dir).changed == 0
        audit = run_audit(load_inventory(sandbox_nodes.inventory_dir), limit=[node])
        checks = {(h.host, c.name): c for h in audit.hosts for c in h.checks}
        assert checks[(node, "earlyoom: one low-memory guard")].ok
        # keep: the operator's choice stands; apply leaves an unmasked, enabled systemd-oomd alone.
        ssh("systemctl unmask -q systemd-oomd.service systemd-oomd.socket; systemctl enable -q systemd-oomd.service")
        kept = sandbox_nodes.inventory_with(tmp_path / "inv", extra_all_vars="    earlyoom: {systemd_oomd: keep}\n")
        assert apply(kept).ok
        assert ssh("systemctl is-enabled systemd-oomd.service") == "enabled"
    finally:
        ssh("systemctl unmask -q systemd-oomd.service systemd-oomd.socket; systemctl disable -q --now "
            "systemd-oomd.service; DEBIAN_FRONTEND=noninteractive apt-get purge -y -q systemd-oomd >/dev/null 2>&1; true")
        apply(sandbox_nodes.inventory_dir)
