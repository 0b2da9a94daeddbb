"""Role ``vllm``: vLLM servers sized from the node budget, following training mode."""

from sparkguard.role import Role

from . import audit
from .checks import preflight, problems
from .settings import VllmSettings
from .state import desired_state

ROLE = Role(
    name="vllm",
    settings=VllmSettings,
    desired_state=desired_state,
    summary="vLLM servers with explicit KV sizes from the node budget; shrink or stop while training",
    checks=problems,
    preflight=preflight,
    audit_probe=audit.probe,
    audit_checks=audit.checks,
    # during_training shrink/stop follows sparkguard-training.target, which base installs (checks.py refuses
    # it with base off); keep needs no base, so base is not a requirement.
    uses=("base",),
    reads=("budget",),  # its servers' sizes come from the node's budget
)
