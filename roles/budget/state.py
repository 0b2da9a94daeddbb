"""Desired state of role ``budget``: the host's plan as /etc/sparkguard/budget.json.

Node-side tools (the training launcher's preflight, alerts, a person at the
console) read the planned numbers from here instead of recomputing them.
"""

from __future__ import annotations

import json

from sparkguard.role import RoleContext
from sparkguard.state import DesiredState, ManagedFile

from .interface import BUDGET_JSON
from .plan import plan_host


def desired_state(ctx: RoleContext) -> DesiredState:
    document = plan_host(ctx.host, ctx.config).to_dict()
    document = {"schema": 1, **document}
    return DesiredState(
        role="budget",
        files=(ManagedFile(BUDGET_JSON, json.dumps(document, indent=2, sort_keys=True) + "\n"),),
    )
