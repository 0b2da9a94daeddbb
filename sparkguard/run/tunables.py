"""The few waits an operator may tune from the environment, checked like any setting.

They are about the operator's side, not a node's desired state, so they are not inventory
settings: a CI job queueing behind another apply waits longer for the lock, a slow link needs a
longer connect timeout, a node known to stall for minutes under load may get longer before its
connection is given up. Each is read once, before any node is contacted; a value that is not a
whole number of seconds in range is refused (exit 2) with the variable, the value and what is
allowed, never a traceback and never silently replaced by the default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import ConfigError, Problem


@dataclass(frozen=True)
class Tunable:
    """An environment variable holding whole seconds; unset (or empty) means ``default``."""

    name: str
    default: int
    minimum: int
    maximum: int
    meaning: str

    def seconds(self) -> int:
        raw = os.environ.get(self.name, "")
        if raw == "":
            return self.default
        if raw.isascii() and raw.isdigit() and self.minimum <= int(raw) <= self.maximum:
            return int(raw)
        allowed = (f"{self.meaning}: a whole number of seconds from {self.minimum} to {self.maximum} "
                   f"(unset: {self.default}); nothing was done on any node")
        raise ConfigError([Problem("", self.name, raw, allowed, source="environment")])


CONNECT_TIMEOUT = Tunable("SPARKGUARD_CONNECT_TIMEOUT", 10, 1, 600, "how long to wait for a node's SSH connection")
# An apply that just ended (or was killed) releases the lock when sshd has noticed: wait that long, not more.
LOCK_WAIT = Tunable("SPARKGUARD_LOCK_WAIT_S", 10, 0, 3600, "how long to wait for a node's apply lock held by another apply")
# sshd answers a liveness request within a second on a healthy node, and within seconds on one under
# heavy memory pressure whose guard works; two minutes of silence is a node that is not coming back soon.
SSH_SILENCE = Tunable("SPARKGUARD_SSH_SILENCE_S", 120, 5, 3600,
                      "how long a connected node's sshd may leave a liveness request unanswered before its "
                      "connection is closed and the node is reported as not answering")
