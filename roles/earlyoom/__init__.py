"""Role ``earlyoom``: the last line of defence, tuned for unified memory."""

from sparkguard.role import Role

from .checks import preflight, problems
from .settings import EarlyoomSettings
from .state import desired_state

ROLE = Role(
    name="earlyoom",
    settings=EarlyoomSettings,
    desired_state=desired_state,
    summary="earlyoom kills the training job first and spares sshd, at lines that hold on unified memory",
    checks=problems,
    preflight=preflight,
)
