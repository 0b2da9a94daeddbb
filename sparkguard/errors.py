"""Errors an operator can act on, printed as one paragraph each.

Every message names where the bad value came from (file, host, dotted field),
the value itself and what would have been accepted, so the fix is obvious
without reading a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

EXIT_CONFIG_ERROR = 2


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one host's settings."""

    host: str
    field: str
    value: Any
    allowed: str
    source: str = ""

    def paragraph(self) -> str:
        where = f"{self.source}: " if self.source else ""
        host = f"host '{self.host}'" if self.host else "inventory"
        field = f", field '{self.field}'" if self.field else ""
        value = f" = {self.value!r}" if self.value is not _MISSING else ""
        return f"{where}{host}{field}{value}: {self.allowed}"


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()
MISSING = _MISSING


class SparkguardError(Exception):
    """An error meant for the operator: printed without a traceback."""

    exit_code = 1

    def paragraphs(self) -> list[str]:
        return [str(self)]


class ConfigError(SparkguardError):
    """The inventory cannot be used; nothing has been touched on any node."""

    exit_code = EXIT_CONFIG_ERROR

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n\n".join(p.paragraph() for p in problems))

    def paragraphs(self) -> list[str]:
        return [p.paragraph() for p in self.problems]


class NodeBusyError(SparkguardError):
    """Another apply holds a node's lock; nothing was applied to any node."""

    exit_code = 1


class ConnectError(SparkguardError):
    """A node could not be reached; nothing was applied to any node."""

    exit_code = 1

    def __init__(self, message: str, hosts: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.hosts = hosts  # the hosts that could not be reached, for a retry file
