"""Role ``budget``: the node's memory budget, checked before anything starts (sparkguard plan)."""

from sparkguard.hostconfig import HostConfig
from sparkguard.role import Role

from .checks import problems
from .plan import has_budget, plan_host
from .settings import BudgetSettings
from .state import desired_state


class _BudgetRole(Role):
    def enabled(self, config: HostConfig) -> bool:
        # Nothing to budget (no served model, no training job): no check, no file.
        return super().enabled(config) and has_budget(config)


ROLE = _BudgetRole(
    name="budget",
    settings=BudgetSettings,
    desired_state=desired_state,
    summary="memory budget: earlyoom's SIGTERM line + OS reserve + vLLM + the training job must fit MemTotal",
    checks=problems,
    plan=plan_host,
    reads=("vllm", "earlyoom"),  # the served models and earlyoom's lines are in the budget
)
