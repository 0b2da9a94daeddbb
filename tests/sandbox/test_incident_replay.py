"""The incident, replayed on a bookworm node (earlyoom 1.7) for every launch path, with every bystander.

See tests/replay.py for the mechanics and the safety bounds. One cell per launch
path; in each, the trainer's memory is hugetlb (in no RSS, in no cgroup), the
stand-in nvidia-smi reports it, and the vLLM stand-in has the larger RSS: the
order must come from the marks and the GPU ranking agent, not from RSS.
"""

from __future__ import annotations

import json

import pytest

from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy
from tests.replay import (
    LAUNCHES,
    SHAPES,
    ReplayPlan,
    apply_with_lab_lines,
    assert_incident_outcome,
    ollama_first,
    print_matrix,
    remove_tools,
    run_cell,
)

# Memory lines from the host's MemAvailable: the full run takes this module alone (pyproject's "replay").
pytestmark = pytest.mark.replay
NODE = "node-1"
MATRIX: list = []


@pytest.fixture(scope="module")
def lab_lines(sandbox_nodes, tmp_path_factory):
    """earlyoom with lines just below the host's current MemAvailable, the agent looking every 0.5 s."""
    patch = pytest.MonkeyPatch()
    patch.setenv("SPARKGUARD_LAB_THRESHOLDS", "1")

    def apply_lines(plan: ReplayPlan) -> None:
        inventory = sandbox_nodes.inventory_with(
            tmp_path_factory.mktemp("replay-inv"),
            extra_all_vars=f"    earlyoom: {{term_percent: {plan.term_percent}, kill_percent: {plan.kill_percent}, "
                           f"report_interval_s: 1, gpu_ranking_interval_s: 0.5}}\n")
        result = run_deploy(load_inventory(inventory), site_deploy)
        assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)

    yield apply_with_lab_lines(apply_lines)
    patch.undo()
    remove_tools(sandbox_nodes, NODE)
    assert run_deploy(load_inventory(sandbox_nodes.inventory_dir), site_deploy).ok
    print_matrix("earlyoom 1.7 on Debian 12", MATRIX)


@pytest.mark.parametrize("launch", ollama_first(list(LAUNCHES) + list(SHAPES)))
def test_trainer_is_killed_first_and_every_bystander_survives(sandbox_nodes, lab_lines, launch, record_property):
    spec = {**LAUNCHES, **SHAPES}[launch]
    result = run_cell(sandbox_nodes, NODE, lab_lines, spec)
    MATRIX.append(result)
    assert_incident_outcome(result, spec)
    record_property("reaction_s", round(result.reaction_s, 3))
