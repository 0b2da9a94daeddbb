"""Role ``swap``: swap policy and training mode (sparkguard-train)."""

from sparkguard.role import Role

from . import audit
from .settings import SwapSettings
from .state import desired_state

ROLE = Role(
    name="swap",
    settings=SwapSettings,
    desired_state=desired_state,
    summary="swap policy (off / on / training-off) and sparkguard-train, which turns swap off for a job",
    audit_probe=audit.probe,
    audit_checks=audit.checks,
    # the SIGTERM line sparkguard-train reserves memory for; the budget and vLLM's mode files its preflight reads
    reads=("earlyoom", "budget", "vllm"),
    requires=("base",),
    requires_why="it installs sparkguard-training.target and node.json",
)
