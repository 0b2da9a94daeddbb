"""What role budget offers the other roles by name.

A role that names one of these declares budget (``Role.reads``); tests/unit/test_architecture.py holds it to that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkguard.layout import CONFIG_DIR

if TYPE_CHECKING:
    from sparkguard.domain.memory.planner import HostPlan
    from sparkguard.hostconfig import HostConfig

# The node's memory budget; sparkguard-train's preflight (role swap) reads it.
BUDGET_JSON = f"{CONFIG_DIR}/budget.json"


def plan_host(host: str, config: HostConfig) -> HostPlan:
    """The node's budget (roles/budget/plan.py): role vllm sizes its servers' utilization from it."""
    from .plan import plan_host as plan

    return plan(host, config)
