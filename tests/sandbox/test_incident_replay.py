"""The incident, replayed on a bookworm node (earlyoom 1.7) for every launch path, with every bystander.

See tests/replay.py for the mechanics and the safety bounds. One cell per launch
path; in each, the trainer's memory is hugetlb (in no RSS, in no cgroup), the
stand-in nvidia-smi reports it, and the vLLM stand-in has the larger RSS: the
order must come from the marks and the GPU ranking agent, not from RSS.
"""

from __future__ import annotations

import json

import pytest

from sparkguard.converge import site_deploy
from sparkguard.inventory import load_inventory
from sparkguard.runner import run_deploy
from tests.replay import LAUNCHES, ReplayPlan, assert_incident_outcome, remove_tools, run_cell
from tests.reporting import report

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
    assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
    yield plan
    patch.undo()
    remove_tools(sandbox_nodes, NODE)
    assert run_deploy(load_inventory(sandbox_nodes.inventory_dir), site_deploy).ok
    print_matrix()


def print_matrix() -> None:
    if not MATRIX:
        return
    report("\nincident replay matrix (earlyoom 1.7; bystanders: vLLM stand-in adj 300 with the larger RSS, "
          "python3 notebook, open SSH session; reaction 0 ms = within the trainer's 50 ms sampling):")
    report(f"  {'launch path':30} {'trainer adj':>11} {'first victim':>13} {'reaction':>9} {'bystanders':>10}")
    for r in MATRIX:
        reaction = f"{r.reaction_s * 1000:.0f} ms" if r.reaction_s is not None else "-"
        report(f"  {r.launch:30} {r.hog_adj or '?':>11} {'trainer' if r.trainer_killed_first else 'OTHER':>13} "
              f"{reaction:>9} {'survived' if r.bystanders_alive else 'HIT':>10}")


@pytest.mark.parametrize("launch", LAUNCHES)
def test_trainer_is_killed_first_and_every_bystander_survives(sandbox_nodes, lab_lines, launch, record_property):
    spec = LAUNCHES[launch]
    result = run_cell(sandbox_nodes, NODE, lab_lines, spec)
    MATRIX.append(result)
    assert_incident_outcome(result, spec)
    record_property("reaction_s", round(result.reaction_s, 3))
