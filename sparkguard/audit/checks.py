"""What a role needs to audit itself: the probe's parsed output, one check, and a few shared judgements.

`sparkguard audit` runs ONE script per host. Each role adds the shell lines that read what only it
knows about (``Role.audit_probe``: e.g. earlyoom's command line) and judges them (``Role.audit_checks``),
so the core audit (sparkguard/audit/run.py) compares files, packages, services, sysctls and checks of every
desired state and knows no role. A probe line reports a runtime value with the helper ``r NAME VALUE``
(read back as ``view.runtime[NAME]``), a file found by a glob with ``f @@V PATH`` (``probe.found_files``).
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..facts import NodeInfo
from ..state import DesiredState, ManagedFile, normal_mode


@dataclass
class Check:
    name: str
    ok: bool
    expected: str
    actual: str


@dataclass
class ProbeOutput:
    info: NodeInfo
    files: dict[str, tuple[str, str]] = field(default_factory=dict)        # path -> (mode:owner:group|absent, sha)
    found_files: dict[str, tuple[str, str]] = field(default_factory=dict)  # the same, for files a role globbed
    packages: dict[str, str] = field(default_factory=dict)
    services: dict[str, tuple[str, str]] = field(default_factory=dict)     # unit -> (is-enabled, is-active)
    sysctls: dict[str, str] = field(default_factory=dict)
    ensures: dict[str, bool] = field(default_factory=dict)
    edits: dict[str, str | None] = field(default_factory=dict)
    runtime: dict[str, str] = field(default_factory=dict)
    # Read for apply's snapshot only: directory -> "mode:owner:group" or "absent"; unit -> systemctl show's
    # SubState and UnitFileState (pyinfra's own notion of running and enabled).
    directories: dict[str, str] = field(default_factory=dict)
    units: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditView:
    """One host as the probe saw it, with the desired state of the role being judged."""

    config: Any
    probe: ProbeOutput
    state: DesiredState | None

    @property
    def info(self) -> NodeInfo:
        return self.probe.info

    @property
    def runtime(self) -> dict[str, str]:
        return self.probe.runtime

    def ensures_hold(self) -> bool:
        """Every Ensure of this role's state holds on the node (the same checks apply runs)."""
        if self.state is None:
            return True
        return all(self.probe.ensures.get(ensure_key(self.state, i), False) for i in range(len(self.state.ensures)))


AuditProbe = Callable[[Any], list[str]]
AuditChecks = Callable[[AuditView], list[Check]]


def q(value: str) -> str:
    return shlex.quote(value)


def ensure_key(state: DesiredState, index: int) -> str:
    """Unique across the variants of one role's state (two variants may differ in their i-th check)."""
    return f"{state.role}.{index}.{hashlib.sha256(state.ensures[index].check.encode()).hexdigest()[:10]}"


def file_problem(managed: ManagedFile, seen: tuple[str, str] | None) -> str | None:
    """What is wrong with one managed file as the probe saw it, or None."""
    if seen is None or seen[0] == "absent":
        return f"{managed.path} missing"
    want = hashlib.sha256(managed.content.encode()).hexdigest()
    if seen[1] != want:
        return f"{managed.path} differs (sha256 {seen[1][:12]}, want {want[:12]})"
    mode, owner, group = (seen[0].split(":") + ["", ""])[:3]
    if mode != normal_mode(managed.mode) or (owner, group) != (managed.owner, managed.group):
        return (f"{managed.path} is {mode} {owner}:{group}, "
                f"want {normal_mode(managed.mode)} {managed.owner}:{managed.group}")
    return None


def short(items: list[str], limit: int = 4) -> str:
    return "; ".join(items[:limit]) + (f"; +{len(items) - limit} more" if len(items) > limit else "")


def usec(value: str) -> int:
    """A systemd property as busctl prints it ('t 30000000') in microseconds; 0 when unreadable."""
    parts = value.split()
    return int(parts[1]) if len(parts) == 2 and parts[1].isdigit() else 0
