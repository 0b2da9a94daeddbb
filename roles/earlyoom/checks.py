"""Cross-field checks of role ``earlyoom`` (run by validate, render and apply)."""

from __future__ import annotations

import os
from collections.abc import Iterator

from sparkguard.errors import Problem

from .names import fragment_problem


MAX_TERM_PERCENT = 50
LAB_ENV = "SPARKGUARD_LAB_THRESHOLDS"


def lab_thresholds() -> bool:
    """Replay tests on a small, mostly idle host need lines near its current MemAvailable (> 50%)."""
    return os.environ.get(LAB_ENV) == "1"


def problems(config) -> Iterator[Problem]:
    settings = config.earlyoom
    if settings.term_percent > MAX_TERM_PERCENT and not lab_thresholds():
        yield Problem("", "earlyoom.term_percent", settings.term_percent,
                      f"above {MAX_TERM_PERCENT}% earlyoom would kill jobs while half the node is still free "
                      f"(allowed: 0 < kill_percent < term_percent <= {MAX_TERM_PERCENT})")
    if settings.kill_percent >= settings.term_percent:
        yield Problem("", "earlyoom.kill_percent", settings.kill_percent,
                      f"must be below earlyoom.term_percent ({settings.term_percent:g}): SIGTERM comes first, "
                      f"SIGKILL only if memory keeps falling (allowed: 0 < kill_percent < term_percent <= 50)")
    for field in ("prefer_extra", "avoid_extra"):
        for index, fragment in enumerate(getattr(settings, field)):
            reason = fragment_problem(fragment)
            if reason:
                yield Problem("", f"earlyoom.{field}[{index}]", fragment, reason)
