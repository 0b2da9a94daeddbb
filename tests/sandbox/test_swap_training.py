"""Role swap on systemd nodes: units verified, sparkguard-train's lifecycle and exit codes.

These nodes share the host's kernel and have no swap (the host's swap is never
touched); what swap itself does is tested in the qemu VM (tests/vm/test_swap_vm.py).
Here: training mode is entered and left however the job ends, the job is the
first OOM victim, refusals change nothing, and the units pass systemd-analyze.
"""

from __future__ import annotations

import json
import time

from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy

TARGET = "sparkguard-training.target"


def apply(inventory_dir):
    result = run_deploy(load_inventory(inventory_dir), site_deploy)
    assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
    return result


def test_units_pass_systemd_analyze_verify(sandbox_nodes):
    apply(sandbox_nodes.inventory_dir)
    rc, out, err = sandbox_nodes.ssh("node-1", "systemd-analyze verify /etc/systemd/system/sparkguard-swapoff.service "
                                               f"/etc/systemd/system/{TARGET} "
                                               "/etc/systemd/system/sparkguard-earlyoom-kills.service "
                                               "/etc/systemd/system/sparkguard-earlyoom-kills.path "
                                               "/etc/systemd/system/sparkguard-training-reaper.service "
                                               "/etc/systemd/system/sparkguard-training-reaper.timer")
    assert rc == 0, out + err


def test_job_runs_in_training_mode_as_first_victim_and_mode_ends_with_it(sandbox_nodes):
    apply(sandbox_nodes.inventory_dir)
    rc, out, err = sandbox_nodes.ssh(
        "node-1", f"cd /tmp && sparkguard-train --name ok -- sh -c 'cat /proc/self/oom_score_adj; "
                  f"systemctl is-active {TARGET} sparkguard-swapoff.service; echo \"cost: $1\"' sh '$5'")
    assert rc == 0, err
    assert out.split("\n")[:4] == ["1000", "active", "active", "cost: $5"], out
    assert sandbox_nodes.ssh("node-1", f"systemctl is-active {TARGET}")[1].strip() == "inactive"


def test_exit_code_is_the_jobs_for_failure_and_signals(sandbox_nodes):
    apply(sandbox_nodes.inventory_dir)
    for command, expected in (("exit 3", 3), ("kill -9 $$", 137), ("kill -TERM $$", 143)):
        rc, _, err = sandbox_nodes.ssh("node-1", f"sparkguard-train -- sh -c '{command}'")
        assert rc == expected, (command, err)
        assert sandbox_nodes.ssh("node-1", f"systemctl is-active {TARGET}")[1].strip() == "inactive"
    status = json.loads(sandbox_nodes.ssh("node-1", "sparkguard-train --status --json")[1])
    assert status["training_mode"] is False
    assert status["last_run"]["exit_code"] == 143 and status["last_run"]["status"] == "TERM"


def test_launcher_killed_job_goes_on_and_mode_ends_with_the_job(sandbox_nodes):
    apply(sandbox_nodes.inventory_dir)
    sandbox_nodes.ssh("node-1", "rm -f /tmp/sg-job-done; (setsid sparkguard-train --name detached -- "
                                "sh -c 'sleep 4; touch /tmp/sg-job-done' > /dev/null 2>&1 &); sleep 1.5; "
                                "pkill -9 -f '[s]parkguard-train --name detached'")
    rc, out, _ = sandbox_nodes.ssh("node-1", f"pgrep -f '[s]parkguard-train --name detached' || true; "
                                             f"systemctl is-active {TARGET}")
    assert out.split() == ["active"], "launcher gone, job and training mode still on"
    time.sleep(5)
    rc, out, _ = sandbox_nodes.ssh("node-1", f"test -e /tmp/sg-job-done && echo done; systemctl is-active {TARGET}")
    assert out.split() == ["done", "inactive"]
    last = json.loads(sandbox_nodes.ssh("node-1", "cat /var/lib/sparkguard/train/last.json")[1])
    assert last["unit"].startswith("sparkguard-job-detached-") and last["exit_code"] == 0


def test_preflight_refuses_a_job_that_does_not_fit_and_changes_nothing(sandbox_nodes):
    apply(sandbox_nodes.inventory_dir)
    before = sandbox_nodes.ssh("node-1", f"systemctl show -p InactiveExitTimestampMonotonic --value {TARGET}")[1]
    rc, out, err = sandbox_nodes.ssh("node-1", "sparkguard-train --peak-gib 100000 -- touch /tmp/sg-must-not-run")
    assert rc == 75
    assert "refused" in err and "Nothing was started" in err
    after = sandbox_nodes.ssh("node-1", f"systemctl show -p InactiveExitTimestampMonotonic --value {TARGET}; "
                                        "test -e /tmp/sg-must-not-run && echo ran || true")[1]
    assert after.split() == before.split()


def test_swap_modes_converge_and_reapply_cleanly_in_a_container(sandbox_nodes, tmp_path):
    """The policy's boot side (masks, fstab) also on nodes without swap; second apply changes nothing."""
    for mode, masked in (("off", "masked"), ("on", "not-masked"), ("training-off", "not-masked")):
        inventory = sandbox_nodes.inventory_with(tmp_path / mode, extra_all_vars=f"    swap: {{mode: {mode}}}\n")
        apply(inventory)
        assert run_deploy(load_inventory(inventory), site_deploy).changed == 0, mode
        state = sandbox_nodes.ssh("node-1", "systemctl is-enabled swap.target || true")[1].strip()
        assert (state == "masked") == (masked == "masked"), (mode, state)
