"""What ``sparkguard audit`` found: one host's checks, and the whole run's, as printed and as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..facts import NodeInfo
from .checks import Check

# SSH round trips per host: the connection (key exchange + auth), then this many commands.
COMMANDS_PER_HOST = 1


@dataclass
class HostAudit:
    host: str
    checks: list[Check] = field(default_factory=list)
    node: NodeInfo | None = None
    seconds: float = 0.0
    commands: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, expected: str, actual: str) -> None:
        self.checks.append(Check(name, bool(ok), expected, actual))


@dataclass
class AuditResult:
    hosts: list[HostAudit]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "ssh_commands_per_host": COMMANDS_PER_HOST,
            "hosts": [
                {"host": h.host, "ok": h.ok, "commands": h.commands,
                 "checks": [asdict(c) for c in h.checks]}
                for h in self.hosts
            ],
        }
