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
)
