"""Cross-field checks of role ``recovery`` (run by validate, render and apply)."""

from __future__ import annotations

from collections.abc import Iterator

from sparkguard.errors import Problem
from sparkguard.hostconfig import HostConfig

from .settings import RecoverySettings


def problems(config: HostConfig) -> Iterator[Problem]:
    recovery: RecoverySettings = config.recovery
    sysctl = recovery.sysctl
    if not (recovery.enabled and sysctl.enabled):
        return
    for field in ("panic_on_oops", "hung_task_panic"):
        if getattr(sysctl, field) and sysctl.panic_reboot_s == 0:
            yield Problem("", f"recovery.sysctl.{field}", True,
                          "a panic without recovery.sysctl.panic_reboot_s > 0 halts the node until someone "
                          "power-cycles it; set panic_reboot_s (e.g. 10) too")
