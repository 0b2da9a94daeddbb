"""Cross-field checks of role ``earlyoom`` (run by validate, render and apply)."""

from __future__ import annotations

from collections.abc import Iterator

from sparkguard.errors import Problem

from .names import fragment_problem


def problems(config) -> Iterator[Problem]:
    settings = config.earlyoom
    if settings.kill_percent >= settings.term_percent:
        yield Problem("", "earlyoom.kill_percent", settings.kill_percent,
                      f"must be below earlyoom.term_percent ({settings.term_percent:g}): SIGTERM comes first, "
                      f"SIGKILL only if memory keeps falling (allowed: 0 < kill_percent < term_percent <= 50)")
    for field in ("prefer_extra", "avoid_extra"):
        for index, fragment in enumerate(getattr(settings, field)):
            reason = fragment_problem(fragment)
            if reason:
                yield Problem("", f"earlyoom.{field}[{index}]", fragment, reason)
