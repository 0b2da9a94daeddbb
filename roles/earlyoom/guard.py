"""Which low-memory guard a node runs: earlyoom where its lines hold, nohang where they do not.

earlyoom 1.7 (Debian 12, Ubuntu 24.04 / DGX OS 7) compares MemAvailable with
MemTotal, so ``-m 8,4`` means 8 % / 4 % of the whole machine, driver memory
included. From 1.8 on (Debian 13, Ubuntu 26.04) it compares MemAvailable with
MemAvailable + AnonPages, and no static argument gives a MemTotal line back
(docs/earlyoom-measurements.md). nohang 0.2 (packaged in Debian 12 and 13 and in
Ubuntu) compares MemAvailable with a line it computes once from MemTotal,
ranks by the kernel's oom_score (so sparkguard's oom_score_adj bands hold) plus
name regexes, and was measured to react as fast as earlyoom 1.7
(docs/earlyoom-measurements.md, "nohang on Debian 13").

``auto`` (the default) picks per node on apply, from what the node would run:
earlyoom if its earlyoom is older than 1.8 (or the operator accepted 1.8 with
``newer_version: accept-anon-relative``), nohang otherwise. Render is offline
and cannot see the node; it renders earlyoom and says so, and a host declared
``guard: nohang`` renders exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkguard.facts import NodeInfo

from .facts import guard_versions
from .settings import EarlyoomSettings

FIRST_ANON_RELATIVE = (1, 8)
GUARDS = ("earlyoom", "nohang")
UNITS = {"earlyoom": "earlyoom.service", "nohang": "nohang.service"}
# The packages' other units that would also run a guard: Debian's nohang enables both, and they conflict.
EXTRA_UNITS = {"earlyoom": (), "nohang": ("nohang-desktop.service",)}
# What a Debian 13 / Ubuntu 26.04 node reports, for the audit's one-round-trip probe of an 'auto' host.
NEWER_DISTRO = NodeInfo(memory_total_bytes=0, raw={"earlyoom_candidate": "1.8.2-1", "nohang_candidate": "0.2.0-3"})


@dataclass(frozen=True)
class GuardChoice:
    guard: str
    reason: str

    @property
    def unit(self) -> str:
        return UNITS[self.guard]

    @property
    def others(self) -> tuple[str, ...]:
        """Every unit of the guards not chosen: switching must leave exactly one guard running."""
        units = [UNITS[g] for g in GUARDS if g != self.guard] + [u for g in GUARDS for u in EXTRA_UNITS[g]]
        return tuple(units)


def _version(version: tuple[int, ...] | None) -> str:
    return ".".join(map(str, version)) if version else "none"


def choose_guard(settings: EarlyoomSettings, live: NodeInfo | None) -> GuardChoice:
    """The guard for one node. Table-tested in tests/unit/test_guard_choice.py."""
    if settings.guard != "auto":
        return GuardChoice(settings.guard, "declared (earlyoom.guard)")
    if live is None:
        return GuardChoice("earlyoom", "auto; render cannot see the node and assumes earlyoom 1.7 "
                                       "(a node whose earlyoom is 1.8+ gets nohang on apply)")
    versions = guard_versions(live)
    version = versions.earlyoom_effective
    if version is None and versions.nohang is not None:
        return GuardChoice("nohang", f"auto: apt has no earlyoom here; nohang {_version(versions.nohang)} "
                                     f"measures against MemTotal")
    if version is None or version < FIRST_ANON_RELATIVE:
        return GuardChoice("earlyoom", f"auto: earlyoom {_version(version)} measures against MemTotal")
    if settings.newer_version == "accept-anon-relative":
        return GuardChoice("earlyoom", f"auto: earlyoom {_version(version)} accepted (earlyoom.newer_version)")
    return GuardChoice("nohang", f"auto: earlyoom {_version(version)} ignores driver memory; nohang "
                                 f"{_version(versions.nohang)} measures against MemTotal")


def live_alternatives(config: Any) -> tuple[NodeInfo, ...]:
    """Node facts that would change this role's output: the audit probes both variants in one round trip."""
    return (NEWER_DISTRO,) if config.earlyoom.guard == "auto" else ()


def describe(config: Any, live: NodeInfo | None) -> dict[str, str]:
    """The apply table's guard column: which guard, which version, and why."""
    choice = choose_guard(config.earlyoom, live)
    if live is None:
        return {"guard": choice.guard, "guard_reason": choice.reason}
    versions = guard_versions(live)
    version = versions.nohang if choice.guard == "nohang" else versions.earlyoom_effective
    return {"guard": f"{choice.guard} {_version(version)}", "guard_reason": choice.reason}
