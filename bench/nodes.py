"""Sandbox nodes for a benchmark run: booted in a private directory, always torn down."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sparkguard.dev import sandbox


@contextmanager
def booted_nodes(nodes: int, net: str, release: str = "bookworm", arch: str | None = None) -> Iterator[tuple[Path, Path]]:
    """Yield (state_dir, inventory_dir) of ``nodes`` nodes of ``release`` on ``net``.x (``arch``: this machine's
    unless named; another one runs under qemu user emulation)."""
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp:
        state, inventory = Path(tmp) / "state", Path(tmp) / "inventory"
        sandbox.up(nodes=nodes, state_dir=state, inventory_dir=inventory, net=net, release=release,
                   log=lambda *_: None, arch=arch)
        try:
            yield state, inventory
        finally:
            sandbox.down(state, log=lambda *_: None)
