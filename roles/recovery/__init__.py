"""Role ``recovery``: a hung node reboots by itself, and the evidence survives the reboot."""

from sparkguard.role import Role

from .checks import problems
from .settings import RecoverySettings
from .state import desired_state

ROLE = Role(
    name="recovery",
    settings=RecoverySettings,
    desired_state=desired_state,
    summary="watchdog, persistent journal, memory protection for sshd/journald, sysrq/panic sysctls, unclean-boot report",
    checks=problems,
)
