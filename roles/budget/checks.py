"""Cross-field checks of role ``budget``: an over-committed host fails validate, render and apply (exit 2)."""

from __future__ import annotations

from collections.abc import Iterator

from sparkguard.errors import Problem
from sparkguard.hostconfig import HostConfig

from .plan import host_problems


def problems(config: HostConfig) -> Iterator[Problem]:
    yield from host_problems(config)
