"""The incident, replayed on a bookworm node (earlyoom 1.7) for every launch path, with every bystander.

See tests/replay.py for the mechanics and the safety bounds. One cell per launch
path; in each, the trainer's memory is hugetlb (in no RSS, in no cgroup), the
stand-in nvidia-smi reports it, and the vLLM stand-in has the larger RSS: the
order must come from the marks and the GPU ranking agent, not from RSS.
"""

from __future__ import annotations

import sys

import pytest

from sparkguard.converge import site_deploy
from sparkguard.inventory import load_inventory
from sparkguard.runner import run_deploy
from tests.replay import LAUNCHES, ReplayPlan, remove_tools, run_cell

NODE = "node-1"
MATRIX: list = []


@pytest.fixture(scope="module")
def lab_lines(sandbox_nodes, tmp_path_factory):
    """earlyoom with lines just below the host's current MemAvailable, the agent looking every 0.5 s."""
    patch = pytest.MonkeyPatch()
    patch.setenv("SPARKGUARD_LAB_THRESHOLDS", "1")
    plan = ReplayPlan.from_host()
    inventory = sandbox_nodes.inventory_with(
        tmp_path_factory.mktemp("replay-inv"),
        extra_all_vars=f"    earlyoom: {{term_percent: {plan.term_percent}, kill_percent: {plan.kill_percent}, "
                       f"report_interval_s: 1, gpu_ranking_interval_s: 0.5}}\n")
    result = run_deploy(load_inventory(inventory), site_deploy)
    assert result.ok, result.as_dict()
    yield plan
    patch.undo()
    remove_tools(sandbox_nodes, NODE)
    assert run_deploy(load_inventory(sandbox_nodes.inventory_dir), site_deploy).ok
    print_matrix()


def print_matrix() -> None:
    if not MATRIX:
        return
    print("\nincident replay matrix (earlyoom 1.7; bystanders: vLLM stand-in adj 300 with the larger RSS, "
          "python3 notebook, open SSH session; reaction 0 ms = within the trainer's 50 ms sampling):",
          file=sys.__stderr__)
    print(f"  {'launch path':30} {'trainer adj':>11} {'first victim':>13} {'reaction':>9} {'bystanders':>10}",
          file=sys.__stderr__)
    for r in MATRIX:
        reaction = f"{r.reaction_s * 1000:.0f} ms" if r.reaction_s is not None else "-"
        print(f"  {r.launch:30} {r.hog_adj or '?':>11} {'trainer' if r.trainer_killed_first else 'OTHER':>13} "
              f"{reaction:>9} {'survived' if r.bystanders_alive else 'HIT':>10}", file=sys.__stderr__)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_trainer_is_killed_first_and_every_bystander_survives(sandbox_nodes, lab_lines, launch, record_property):
    spec = LAUNCHES[launch]
    result = run_cell(sandbox_nodes, NODE, lab_lines, spec)
    MATRIX.append(result)
    detail = (f"{result.hog_exit}\nadj {result.hog_adj}\n{result.hog_events[-3:]}\n"
              f"{result.earlyoom_log[-1500:]}")
    assert result.got_sigterm, detail
    assert result.trainer_killed_first, detail                    # earlyoom's first signal went to the trainer
    assert result.hog_exit.split()[-1] in ("143", "15"), detail   # SIGTERM sufficed: no SIGKILL needed
    assert result.bystander_alive and result.vllm_alive, detail
    assert result.ssh_session_alive and result.sshd_alive and result.earlyoom_alive and result.fresh_login
    assert result.logins_during >= 2
    # The trainer was ranked as its class: marked 1000, or raised by the agent from its GPU memory.
    if spec.marked:
        assert result.hog_adj == "1000", detail
    else:
        assert 600 <= int(result.hog_adj or 0) < 1000, detail
    # Counted once, under the trainer's comm.
    assert result.kills_after - result.kills_before == 1, result.kill_counter
    assert f'sparkguard_earlyoom_kills_total{{victim="{spec.comm}"}}' in result.kill_counter
    if spec.host_cgroup:
        # The bypass really happened: the trainer held more than twice its cgroup's limit, the cgroup saw almost nothing.
        allocated = max(e.get("allocated_mib", 0) for e in result.hog_events)
        assert allocated * 2**20 > 2 * result.cgroup_limit_bytes, allocated
        assert 0 <= result.cgroup_peak_bytes < result.cgroup_limit_bytes // 4, result.cgroup_peak_bytes
    if spec.record:
        assert result.record and result.record["killed_by_earlyoom"] is True, result.record
        assert result.record["exit_code"] == 143
    assert result.reaction_s is not None
    record_property("reaction_s", round(result.reaction_s, 3))
