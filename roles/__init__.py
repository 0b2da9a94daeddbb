"""sparkguard's roles, in the order ``deploy/site.py`` applies them.

Each role is a package with ``settings.py`` (every variable, its default and
its documentation, in one place), ``state.py`` (the pure desired-state
function) and ``ROLE``, registered here.
"""

from . import base, budget, earlyoom, monitoring, recovery, swap, vllm

ROLES = (base.ROLE, earlyoom.ROLE, swap.ROLE, recovery.ROLE, monitoring.ROLE, budget.ROLE, vllm.ROLE)
ROLES_BY_NAME = {role.name: role for role in ROLES}
