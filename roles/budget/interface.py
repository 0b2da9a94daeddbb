"""What role budget offers the other roles by name.

A role that names one of these declares budget (``Role.reads``); tests/unit/test_architecture.py holds it to that.
"""

from sparkguard.layout import CONFIG_DIR

# The node's memory budget; sparkguard-train's preflight (role swap) reads it.
BUDGET_JSON = f"{CONFIG_DIR}/budget.json"
