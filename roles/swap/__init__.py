"""Role ``swap``: swap policy and training mode (sparkguard-train)."""

from sparkguard.role import Role

from .settings import SwapSettings
from .state import desired_state

ROLE = Role(
    name="swap",
    settings=SwapSettings,
    desired_state=desired_state,
    summary="swap policy (off / on / training-off) and sparkguard-train, which turns swap off for a job",
)
