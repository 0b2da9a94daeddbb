"""Debian 13 (earlyoom 1.8.2): the node gets nohang, whose lines are MemTotal's; earlyoom 1.8 only knowingly.

Order matters (one trixie node for the module): the refusal first (nothing applied yet),
then the default (auto -> nohang), switches both ways, the measured reason 1.8 is not
used, and the incident replay under nohang.
"""

from __future__ import annotations

import json

import pytest

from sparkguard.audit.run import run_audit
from sparkguard.engine.converge import site_deploy
from sparkguard.errors import ConfigError
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy
from tests.replay import (
    GIB,
    LAUNCHES,
    NOHANG_MAX_LINE_PERCENT,
    SHAPES,
    ReplayPlan,
    apply_with_lab_lines,
    assert_incident_outcome,
    host_ballast,
    meminfo_kib,
    ollama_first,
    print_matrix,
    remove_tools,
    run_cell,
    run_replay,
)
from tests.reporting import report

# Memory lines from the host's MemAvailable: the full run takes this module alone (pyproject's "replay").
pytestmark = pytest.mark.replay
NODE = "node-1"
ACCEPT = "    earlyoom: {newer_version: accept-anon-relative}\n"
GUARDS = "for u in earlyoom nohang nohang-desktop; do echo $u $(systemctl is-active $u) $(systemctl is-enabled $u); done"


def guard_states(node) -> dict[str, tuple[str, str]]:
    _, out, _ = node.ssh(NODE, GUARDS)
    return {parts[0]: (parts[1], parts[2] if len(parts) > 2 else "") for parts in map(str.split, out.splitlines())}


def running_guards(node) -> list[str]:
    return [unit for unit, (active, _) in guard_states(node).items() if active == "active"]


def test_earlyoom_declared_on_1_8_is_refused_before_anything_is_applied(trixie_node, tmp_path):
    inventory = trixie_node.inventory_with(tmp_path / "inv", extra_all_vars="    earlyoom: {guard: earlyoom}\n")
    with pytest.raises(ConfigError) as caught:
        run_deploy(load_inventory(inventory), site_deploy)
    [problem] = caught.value.problems
    assert (problem.host, problem.field, problem.value) == (NODE, "earlyoom.guard", "earlyoom")
    assert "1.8.2" in problem.allowed and "nohang" in problem.allowed and "accept-anon-relative" in problem.allowed
    rc, out, _ = trixie_node.ssh(NODE, "test -e /etc/sparkguard && echo touched; command -v earlyoom nohang || true")
    assert out.strip() == ""


def test_auto_gives_nohang_at_lines_of_memtotal_and_the_second_apply_is_clean(trixie_node):
    inventory = load_inventory(trixie_node.inventory_dir)
    first = run_deploy(inventory, site_deploy)
    assert first.ok, json.dumps(first.as_dict(), indent=1, default=str)
    assert first.hosts[0].described["guard"].startswith("nohang 0."), first.hosts[0].described
    assert "1.8.2" in first.hosts[0].described["guard_reason"]
    second = run_deploy(inventory, site_deploy)
    assert second.changed == 0, second.hosts[0].changed_names
    assert running_guards(trixie_node) == ["nohang"]
    assert guard_states(trixie_node)["nohang-desktop"][1] == "masked"
    # nohang computed the lines itself from MemTotal: 8 % / 4 % of this host.
    _, log, _ = trixie_node.ssh(NODE, "nohang --check --config /etc/nohang/nohang.conf | grep -E '_threshold_min_mem'")
    total_mib = meminfo_kib("MemTotal") / 1024
    assert f"soft_threshold_min_mem:   {round(total_mib * 0.08)} MiB, 8.0 %" in log, log
    assert f"hard_threshold_min_mem:   {round(total_mib * 0.04)} MiB, 4.0 %" in log, log
    _, prom, _ = trixie_node.ssh(NODE, "cat /var/lib/prometheus/node-exporter/sparkguard_earlyoom.prom")
    assert 'sparkguard_guard_info{guard="nohang"} 1' in prom and "sparkguard_earlyoom_kills_all_total 0" in prom
    audit = run_audit(inventory)
    checks = {c.name: c for c in audit.hosts[0].checks}
    assert audit.ok, [(c.name, c.actual) for c in audit.hosts[0].checks if not c.ok]
    assert checks["earlyoom: one low-memory guard"].actual == "nohang running"


def test_switching_guards_leaves_exactly_one_running(trixie_node, tmp_path):
    accepted = trixie_node.inventory_with(tmp_path / "inv", extra_all_vars=ACCEPT)
    to_earlyoom = run_deploy(load_inventory(accepted), site_deploy)
    assert to_earlyoom.ok, json.dumps(to_earlyoom.as_dict(), indent=1, default=str)
    assert to_earlyoom.hosts[0].described["guard"] == "earlyoom 1.8.2"
    assert running_guards(trixie_node) == ["earlyoom"]
    states = guard_states(trixie_node)
    assert states["nohang"][1] != "enabled" and states["nohang-desktop"][1] in ("masked", "disabled")
    assert run_deploy(load_inventory(accepted), site_deploy).changed == 0
    audit = run_audit(load_inventory(accepted))
    assert {c.name: c.ok for c in audit.hosts[0].checks}["earlyoom: one low-memory guard"]

    back = run_deploy(load_inventory(trixie_node.inventory_dir), site_deploy)
    assert back.ok and back.hosts[0].described["guard"].startswith("nohang")
    assert running_guards(trixie_node) == ["nohang"]
    assert guard_states(trixie_node)["earlyoom"][1] == "disabled"
    assert run_deploy(load_inventory(trixie_node.inventory_dir), site_deploy).changed == 0


def test_why_not_earlyoom_1_8_it_does_not_fire_on_driver_memory(trixie_node, tmp_path, monkeypatch):
    """Measured, not assumed: with the host-level line crossed by invisible memory, 1.8.2 stays silent."""
    monkeypatch.setenv("SPARKGUARD_LAB_THRESHOLDS", "1")
    plan = ReplayPlan.from_host()
    plan.bystander_mib = 64
    inventory = trixie_node.inventory_with(
        tmp_path / "inv",
        extra_all_vars=f"    earlyoom: {{newer_version: accept-anon-relative, term_percent: {plan.term_percent}, "
                       f"kill_percent: {plan.kill_percent}, report_interval_s: 1}}\n")
    assert run_deploy(load_inventory(inventory), site_deploy).ok
    try:
        # 15 s: the hog's creep (CREEP_STEP_MIB every 0.2 s) is past the line about 4 s after it starts and at its
        # cap by 8 s, and holds there; earlyoom polls at least once a second: ten looks and more past the line.
        result = run_replay(trixie_node, NODE, plan, timeout_s=15)
    finally:
        assert run_deploy(load_inventory(trixie_node.inventory_dir), site_deploy).ok  # back to nohang
    below = result.lowest_below_line_kib
    assert below is not None and below > 100 * 1024, "the hog must take MemAvailable well below the line"
    assert not result.got_sigterm, result.earlyoom_log[-800:]
    report(f"\nearlyoom 1.8.2: MemAvailable went {below / 1024:.0f} MiB below the host-level SIGTERM line; "
          f"no signal was sent")


@pytest.fixture(scope="module")
def nohang_lab(trixie_node, tmp_path_factory):
    """nohang with lines below 50 % of MemTotal (its limit), reached by a bounded host ballast."""
    total = meminfo_kib("MemTotal")
    plan_at = ReplayPlan(total, 0)
    # MemAvailable for a SIGTERM line at 45 % of MemTotal once the trainer has taken term_after.
    target = int(0.45 * total) + plan_at.bystander_mib * 1024 + plan_at.term_after_bytes // 1024
    with host_ballast(target, cap_mib=14 * 1024):

        def apply_lines(plan: ReplayPlan) -> None:
            assert plan.kill_percent < plan.term_percent < NOHANG_MAX_LINE_PERCENT, plan
            inventory = trixie_node.inventory_with(
                tmp_path_factory.mktemp("nohang-replay-inv"),
                extra_all_vars=f"    earlyoom: {{term_percent: {plan.term_percent}, kill_percent: {plan.kill_percent}, "
                               f"report_interval_s: 1, gpu_ranking_interval_s: 0.5}}\n")
            result = run_deploy(load_inventory(inventory), site_deploy)
            assert result.ok and result.hosts[0].described["guard"].startswith("nohang"), json.dumps(result.as_dict(), indent=1, default=str)

        yield apply_with_lab_lines(apply_lines)
    remove_tools(trixie_node, NODE)
    assert run_deploy(load_inventory(trixie_node.inventory_dir), site_deploy).ok


NOHANG_MATRIX: list = []


@pytest.mark.parametrize("launch", ollama_first(["sparkguard-train", "python3 in a --memory cgroup", *SHAPES]))
def test_incident_replay_under_nohang_kills_the_trainer_first_and_spares_everything_else(
        trixie_node, nohang_lab, launch, record_property):
    spec = {**LAUNCHES, **SHAPES}[launch]
    result = run_cell(trixie_node, NODE, nohang_lab, spec, guard="nohang")
    NOHANG_MATRIX.append(result)
    if len(NOHANG_MATRIX) == 2 + len(SHAPES):
        print_matrix("nohang 0.2.0 on Debian 13", NOHANG_MATRIX)
    assert_incident_outcome(result, spec)
    record_property("reaction_s", round(result.reaction_s, 3))
    report(f"\nnohang, {launch}: SIGTERM {result.reaction_s * 1000:.0f} ms after the line "
          f"({nohang_lab.term_percent}% of MemTotal, {nohang_lab.term_line_kib / GIB * 1024:.2f} GiB); "
          f"next victims held back while the job's memory came back: {result.held_back}")
