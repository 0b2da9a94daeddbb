"""Count SSH round trips per node at paramiko: every command (an exec channel: pyinfra's commands and
facts, the node lock) and every file upload (SFTP). The connection itself (key exchange and
authentication) is one more per host and is not counted here.

Shared by the round-trip tests and bench/ (a node is told apart by its address: sandbox nodes each
have their own loopback address).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import paramiko


def _peer(channel: Any) -> str:
    try:
        return str(channel.get_transport().getpeername()[0])
    except Exception:  # noqa: BLE001 - a closed transport: counted under "?"
        return "?"


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """``with counting() as trips:`` ... ``trips["127.0.77.2"]``: round trips per node address meanwhile."""
    trips: Counter[str] = Counter()
    exec_command, putfo = paramiko.Channel.exec_command, paramiko.SFTPClient.putfo

    def counted_exec(self: paramiko.Channel, command: Any) -> Any:
        trips[_peer(self)] += 1
        return exec_command(self, command)

    def counted_put(self: paramiko.SFTPClient, *args: Any, **kwargs: Any) -> Any:
        trips[_peer(self.sock)] += 1
        return putfo(self, *args, **kwargs)

    paramiko.Channel.exec_command = counted_exec  # type: ignore[method-assign]
    paramiko.SFTPClient.putfo = counted_put  # type: ignore[method-assign]
    try:
        yield trips
    finally:
        paramiko.Channel.exec_command = exec_command  # type: ignore[method-assign]
        paramiko.SFTPClient.putfo = putfo  # type: ignore[method-assign]
