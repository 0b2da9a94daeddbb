"""sparkguard's roles, in the order ``deploy/site.py`` applies them.

Each role is a package with ``settings.py`` (every variable, its default and
its documentation, in one place), ``state.py`` (the pure desired-state
function) and ``ROLE``, registered here.
"""

from . import base, budget, earlyoom, monitoring, recovery, swap, vllm

ROLES = (base.ROLE, earlyoom.ROLE, swap.ROLE, recovery.ROLE, monitoring.ROLE, budget.ROLE, vllm.ROLE)
ROLES_BY_NAME = {role.name: role for role in ROLES}


def register() -> None:
    """Hand these roles to the core (sparkguard.registry): what every entry point does first."""
    from sparkguard import registry

    registry.use(ROLES)
