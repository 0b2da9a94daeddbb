"""Role ``earlyoom``: the last line of defence, tuned for unified memory (earlyoom 1.7, or nohang)."""

from sparkguard.role import Role

from . import audit
from .checks import preflight, problems
from .facts import PROBE_LINES
from .guard import describe, live_alternatives
from .settings import EarlyoomSettings
from .state import desired_state

ROLE = Role(
    name="earlyoom",
    settings=EarlyoomSettings,
    desired_state=desired_state,
    summary="a low-memory guard (earlyoom 1.7, or nohang where earlyoom is 1.8+) kills the training job first and"
            " spares sshd, at lines of MemTotal that hold on unified memory",
    checks=problems,
    fact_probe=PROBE_LINES,
    preflight=preflight,
    describe=describe,
    live_alternatives=live_alternatives,
    audit_probe=audit.probe,
    audit_checks=audit.checks,
    reads=("vllm", "swap"),  # serving's band and units (vllm); training jobs' units (swap)
)
