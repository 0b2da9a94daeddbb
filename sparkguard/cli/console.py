"""One rich console for every command's tables.

Piped into a file or a CI log, rich would wrap tables at 80 columns and cut
host names and paths; operators paste these reports into tickets, so give
them room when there is no terminal to measure.
"""

from __future__ import annotations

import sys

from rich.console import Console

PIPE_WIDTH = 140


def console() -> Console:
    if sys.stdout.isatty():
        return Console()
    return Console(width=PIPE_WIDTH)
