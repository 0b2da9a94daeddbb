"""The incident, replayed on a bookworm node (earlyoom 1.7) with role earlyoom applied.

See tests/replay.py for the mechanics and the safety bounds.
"""

from __future__ import annotations

import sys

import pytest

from sparkguard.converge import site_deploy
from sparkguard.inventory import load_inventory
from sparkguard.runner import run_deploy
from tests.replay import ReplayPlan, run_replay


@pytest.fixture
def lab_lines(sandbox_nodes, tmp_path, monkeypatch):
    """Apply earlyoom with lines just below the host's current MemAvailable; restore the defaults after."""
    monkeypatch.setenv("SPARKGUARD_LAB_THRESHOLDS", "1")
    plan = ReplayPlan.from_host()
    inventory = sandbox_nodes.inventory_with(
        tmp_path / "inv",
        extra_all_vars=f"    earlyoom: {{term_percent: {plan.term_percent}, kill_percent: {plan.kill_percent}, "
                       f"report_interval_s: 1}}\n")
    result = run_deploy(load_inventory(inventory), site_deploy)
    assert result.ok, result.as_dict()
    yield plan
    monkeypatch.delenv("SPARKGUARD_LAB_THRESHOLDS")
    assert run_deploy(load_inventory(sandbox_nodes.inventory_dir), site_deploy).ok


def test_trainer_invisible_to_cgroup_is_killed_first_and_ssh_survives(sandbox_nodes, lab_lines, record_property):
    result = run_replay(sandbox_nodes, "node-1", lab_lines)
    detail = f"{result.hog_exit}\n{result.hog_events[-5:]}\n{result.earlyoom_log[-1500:]}"
    assert result.got_sigterm, detail
    assert result.hog_exit.split()[-1] in ("143", "15"), detail  # SIGTERM sufficed: no SIGKILL needed
    assert result.bystander_alive, detail
    assert result.sshd_alive and result.earlyoom_alive
    assert result.logins_during >= 2
    assert sandbox_nodes.ssh("node-1", "true")[0] == 0  # a NEW login after the kill
    # The bypass really happened: the hog held more than twice its cgroup's limit, the cgroup saw almost nothing.
    allocated = max(e.get("allocated_mib", 0) for e in result.hog_events)
    assert allocated * 2**20 > 2 * result.cgroup_limit_bytes, allocated
    assert 0 <= result.cgroup_peak_bytes < result.cgroup_limit_bytes // 4, result.cgroup_peak_bytes
    assert 'sparkguard_earlyoom_kills_total{victim="pt_main_thread"} 1' in result.kill_counter
    assert "sparkguard_earlyoom_kills_all_total 1" in result.kill_counter
    assert "pt_main_thread" in result.earlyoom_log
    assert result.reaction_s is not None
    record_property("reaction_s", round(result.reaction_s, 3))
    print(f"\nincident replay (earlyoom 1.7): SIGTERM {result.reaction_s * 1000:.0f} ms after MemAvailable crossed the "
          f"line; it fell {result.lowest_below_line_kib / 1024:.0f} MiB below it; hog held {allocated} MiB; "
          f"cgroup peak {result.cgroup_peak_bytes / 2**20:.1f} MiB of {result.cgroup_limit_bytes >> 20} MiB",
          file=sys.__stderr__)
