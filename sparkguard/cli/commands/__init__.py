"""One module per ``sparkguard`` subcommand, each with ``register(sub)`` and ``run(args)``."""

from __future__ import annotations

import argparse
from typing import TypeAlias

# What argparse's add_subparsers() returns (its class is private; this names it once).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
