"""Figures the suites promise (bad-input tally, fault table, replay matrix, ...), shown at the end of pytest's output.

Printing from a test or fixture is captured (even to sys.__stderr__: pytest captures the file
descriptor), so a passing run would hide exactly the numbers it exists to show. Under pytest-xdist
(the unit tier runs on every core) a worker's figures go to a file in a directory the main process
made (FIGURES_DIR), and the main process shows them with its own.
"""

from __future__ import annotations

import os
from pathlib import Path

LINES: list[str] = []
FIGURES_DIR = "SPARKGUARD_FIGURES_DIR"


def report(*lines: str) -> None:
    stripped = [line.strip("\n") for line in lines]
    worker, shared = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(FIGURES_DIR)
    if worker and shared:
        with open(Path(shared) / worker, "a", encoding="utf-8") as figures:
            figures.write("".join(f"{line}\n" for line in stripped))
    else:
        LINES.extend(stripped)


def all_lines() -> list[str]:
    """This process's figures, then each worker's."""
    shared = os.environ.get(FIGURES_DIR)
    workers = sorted(Path(shared).iterdir()) if shared and Path(shared).is_dir() else []
    return LINES + [line for path in workers for line in path.read_text(encoding="utf-8").splitlines()]
