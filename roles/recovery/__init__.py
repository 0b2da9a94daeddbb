"""Role ``recovery``: a hung node reboots by itself, and the evidence survives the reboot."""

from sparkguard.role import Role

from . import audit
from .checks import problems
from .settings import RecoverySettings
from .state import desired_state

ROLE = Role(
    name="recovery",
    settings=RecoverySettings,
    desired_state=desired_state,
    summary="watchdog, persistent journal, memory protection for sshd/journald, sysrq/panic sysctls, unclean-boot report",
    checks=problems,
    audit_probe=audit.probe,
    audit_checks=audit.checks,
    requires=("base",),
    requires_why="it validates its sysctl file with base's sysctl-check before the file replaces the live one",
)
