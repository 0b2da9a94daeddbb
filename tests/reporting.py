"""Figures the suites promise (bad-input tally, fault table, replay matrix, ...), shown at the end of pytest's output.

Printing from a test or fixture is captured (even to sys.__stderr__: pytest captures the file
descriptor), so a passing run would hide exactly the numbers it exists to show.
"""

from __future__ import annotations

LINES: list[str] = []


def report(*lines: str) -> None:
    LINES.extend(line.strip("\n") for line in lines)
