"""Run a sparkguard pyinfra operation's generator outside a deploy: facts in (given), commands out."""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from types import SimpleNamespace

from pyinfra.api import FileUploadCommand
from pyinfra.context import ctx_host


def commands(op, *args, **kwargs) -> list[str]:
    """The shell commands ``op`` would run (uploads shown as 'upload <remote path>')."""
    out = []
    for command in op._inner(*args, **kwargs):
        if isinstance(command, FileUploadCommand):
            out.append(f"upload {command.dest} via {command.remote_temp_filename}")
        else:
            out.append(command.get_raw_value() if hasattr(command, "get_raw_value") else str(command))
    return out


@contextmanager
def node(facts: dict | None = None, **data):
    """A stand-in for pyinfra's ``host``: host data, and ``get_fact`` answering from ``facts`` {fact class: value}."""
    facts = facts or {}
    fake = SimpleNamespace(
        name="node-1",
        current_op_hash=None,
        data=data,
        get_temp_filename=lambda path: f"/tmp/pyinfra-{hashlib.sha1(path.encode()).hexdigest()}",
        get_fact=lambda fact, **_: facts[fact],
    )
    with ctx_host.use(fake):
        yield fake
