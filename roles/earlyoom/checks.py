"""Cross-field checks of role ``earlyoom`` (run by validate, render and apply)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from sparkguard.errors import Problem
from sparkguard.facts import NodeInfo

from .facts import guard_versions
from .guard import FIRST_ANON_RELATIVE, choose_guard
from .names import fragment_problem, unit_glob_problem

MAX_TERM_PERCENT = 50
LAB_ENV = "SPARKGUARD_LAB_THRESHOLDS"


def lab_thresholds() -> bool:
    """Replay tests on a small, mostly idle host need lines near its current MemAvailable (> 50%)."""
    return os.environ.get(LAB_ENV) == "1"


def problems(config: Any) -> Iterator[Problem]:
    settings = config.earlyoom
    if settings.term_percent > MAX_TERM_PERCENT and not lab_thresholds():
        yield Problem("", "earlyoom.term_percent", settings.term_percent,
                      f"above {MAX_TERM_PERCENT}% earlyoom would kill jobs while half the node is still free "
                      f"(allowed: 0 < kill_percent < term_percent <= {MAX_TERM_PERCENT})")
    if settings.kill_percent >= settings.term_percent:
        yield Problem("", "earlyoom.kill_percent", settings.kill_percent,
                      f"must be below earlyoom.term_percent ({settings.term_percent:g}): SIGTERM comes first, "
                      f"SIGKILL only if memory keeps falling (allowed: 0 < kill_percent < term_percent <= 50)")
    for index, glob in enumerate(settings.serving_units_extra):
        reason = unit_glob_problem(glob)
        if reason:
            yield Problem("", f"earlyoom.serving_units_extra[{index}]", glob, reason)
    for field in ("prefer_extra", "avoid_extra", "serving_extra"):
        for index, fragment in enumerate(getattr(settings, field)):
            reason = fragment_problem(fragment)
            if reason:
                yield Problem("", f"earlyoom.{field}[{index}]", fragment, reason)


def _unreadable_version(info: NodeInfo) -> tuple[str, str] | None:
    """A version string the node printed that does not parse: (where it came from, the string), else None."""
    installed = info.raw.get("earlyoom_version", "").strip()
    candidate = info.raw.get("earlyoom_candidate", "").strip()
    versions = guard_versions(info)
    if installed and "not found" not in installed and versions.earlyoom is None:
        return "installed earlyoom (earlyoom -v)", installed[:80]
    if not versions.earlyoom and candidate not in ("", "(none)") and versions.earlyoom_candidate is None:
        return "version apt would install (apt-cache policy)", candidate[:80]
    return None


def preflight(config: Any, info: NodeInfo) -> Iterator[Problem]:
    """Refuse a guard whose lines would not hold on this node, before anything is applied."""
    settings = config.earlyoom
    unreadable = _unreadable_version(info)
    if unreadable and settings.newer_version == "refuse" and settings.guard != "nohang":
        what, text = unreadable
        yield Problem("", "earlyoom", text,
                      f"cannot read earlyoom's version from the {what}: refused rather than guessed, because from 1.8 "
                      f"on earlyoom's lines ignore driver memory (docs/earlyoom-measurements.md). Report the string;"
                      f" meanwhile set earlyoom.guard: nohang, or earlyoom.newer_version: accept-anon-relative to"
                      f" install this earlyoom anyway, or earlyoom.enabled: false")
        return
    choice = choose_guard(settings, info)
    versions = guard_versions(info)
    if choice.guard == "nohang":
        if versions.nohang is None:
            yield Problem("", "earlyoom.guard", settings.guard,
                          f"this node's guard is nohang ({choice.reason}), but apt has no nohang package here (it is in"
                          f" Debian 12/13 and Ubuntu universe): enable that archive, or set earlyoom.guard: earlyoom"
                          f" with a 1.7 earlyoom, or earlyoom.enabled: false")
        return
    version = versions.earlyoom_effective
    if version is None or version < FIRST_ANON_RELATIVE or settings.newer_version != "refuse":
        return
    shown = ".".join(map(str, version))
    source = "installed" if versions.earlyoom else "the version apt would install"
    yield Problem(
        "", "earlyoom.guard", settings.guard,
        f"this node's earlyoom is {shown} ({source}). From 1.8 on, earlyoom computes its percentage as "
        f"MemAvailable/(MemAvailable+AnonPages); GPU driver memory is in neither term, so the SIGTERM line at "
        f"{settings.term_percent:g}% of MemTotal would fire late or never on a unified-memory node (measured: "
        f"docs/earlyoom-measurements.md). Ways out: set earlyoom.guard: auto or nohang (nohang's lines are "
        f"fractions of MemTotal); or set earlyoom.newer_version: accept-anon-relative for this host to run "
        f"earlyoom {shown} knowing its lines are relative to anonymous memory; or earlyoom.enabled: false.",
    )
