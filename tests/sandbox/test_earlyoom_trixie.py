"""earlyoom 1.8.2 (Debian 13): refused by default, installable knowingly, and why (measured)."""

from __future__ import annotations

import sys

import pytest

from sparkguard.converge import site_deploy
from sparkguard.errors import ConfigError
from sparkguard.inventory import load_inventory
from sparkguard.runner import run_deploy
from tests.replay import ReplayPlan, run_replay

ACCEPT = "    earlyoom: {newer_version: accept-anon-relative}\n"


def test_refused_by_default_before_anything_is_applied(trixie_node):
    with pytest.raises(ConfigError) as caught:
        run_deploy(load_inventory(trixie_node.inventory_dir), site_deploy)
    [problem] = caught.value.problems
    assert (problem.host, problem.field, problem.value) == ("node-1", "earlyoom.newer_version", "refuse")
    assert "1.8.2" in problem.allowed and "accept-anon-relative" in problem.allowed
    rc, out, _ = trixie_node.ssh("node-1", "test -e /etc/sparkguard && echo touched; command -v earlyoom || true")
    assert out.strip() == ""


def test_accepted_1_8_installs_without_1_7_only_quirks_and_is_idempotent(trixie_node, tmp_path):
    inventory = trixie_node.inventory_with(tmp_path / "inv", extra_all_vars=ACCEPT)
    first = run_deploy(load_inventory(inventory), site_deploy)
    assert first.ok, first.as_dict()
    assert first.hosts[0].node.earlyoom_effective_version >= (1, 8)
    second = run_deploy(load_inventory(inventory), site_deploy)
    assert second.changed == 0, second.hosts[0].changed_names
    rc, out, _ = trixie_node.ssh("node-1", "earlyoom -v 2>&1; systemctl is-active earlyoom; "
                                           "cat /var/lib/prometheus/node-exporter/sparkguard_earlyoom.prom")
    assert "v1.8" in out and "\nactive\n" in out
    assert "sparkguard_earlyoom_kills_all_total 0" in out


def test_why_it_is_refused_1_8_does_not_fire_on_driver_memory(trixie_node, tmp_path, monkeypatch):
    """Measured, not assumed: with the host-level line crossed by invisible memory, 1.8.2 stays silent."""
    monkeypatch.setenv("SPARKGUARD_LAB_THRESHOLDS", "1")
    plan = ReplayPlan.from_host()
    plan.bystander_mib = 64
    inventory = trixie_node.inventory_with(
        tmp_path / "inv",
        extra_all_vars=f"    earlyoom: {{newer_version: accept-anon-relative, term_percent: {plan.term_percent}, "
                       f"kill_percent: {plan.kill_percent}, report_interval_s: 1}}\n")
    assert run_deploy(load_inventory(inventory), site_deploy).ok
    result = run_replay(trixie_node, "node-1", plan, timeout_s=20)
    below = result.lowest_below_line_kib
    assert below is not None and below > 100 * 1024, "the hog must take MemAvailable well below the line"
    assert not result.got_sigterm, result.earlyoom_log[-800:]
    print(f"\nearlyoom 1.8.2: MemAvailable went {below / 1024:.0f} MiB below the host-level SIGTERM line; "
          f"no signal was sent", file=sys.__stderr__)
