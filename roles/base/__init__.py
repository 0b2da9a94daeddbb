"""Role ``base``: sparkguard's directory layout on the node and ``node.json``."""

from sparkguard.role import Role

from .settings import BaseSettings
from .state import desired_state

ROLE = Role(
    name="base",
    settings=BaseSettings,
    desired_state=desired_state,
    summary="sparkguard's node-side layout (/etc/sparkguard, /var/lib/sparkguard) and node.json",
)
