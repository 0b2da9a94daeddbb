"""A command's end-of-input sent so that it can never follow the channel's close.

When a command's stdin is closed (pyinfra closes it right after starting each command; a
``ChannelStdinFile`` closes it when it is garbage-collected), paramiko's ``Channel.shutdown_write``
builds the CHANNEL_EOF message under the channel's lock and sends it after releasing the lock.
The transport's thread, handling the server's CHANNEL_CLOSE of a command that has just ended,
sends its own CLOSE in that gap. The EOF then arrives after the CLOSE, for a channel OpenSSH has
already freed, and OpenSSH ends the whole connection ("ieof packet referred to nonexistent
channel", channels.c ``channel_from_packet_id``). paramiko sees a clean disconnect: the next
command fails with "Unable to open channel." (upstream: paramiko/paramiko#1115 and #1705, open).

Seen in CI on 2026-12-07, on the connection a VM test kept open for its control commands: the
stdin of the previous command was collected just as the server closed its channel. The same gap
exists behind every pyinfra command, far narrower: there the EOF goes out before the command can
have ended, unless the sending thread is descheduled right in the gap (a loaded 2-core runner).

``shutdown_write`` here sends the EOF while it holds the channel's lock, which the transport's
thread takes to handle the close: whichever comes first, EOF precedes CLOSE. The cost: while a key
re-exchange that this client started is under way, the send waits (paramiko bounds that wait with
``clear_to_send_timeout``) and the transport's thread may wait on the lock for a message of this
channel; a rekey comes only every 2^29 bytes or packets, and the worst case is one failed
command after that timeout, never a hang.
"""

from __future__ import annotations

from typing import Any

import paramiko
from paramiko.channel import ChannelFile, ChannelStderrFile, ChannelStdinFile

_INSTALLED = "_sparkguard_eof_in_order"


def shutdown_write(channel: paramiko.Channel) -> None:
    """Send ``channel``'s EOF unless it has been sent already (by an earlier call, or with the close)."""
    with channel.lock:
        # paramiko 4.0 (pinned): _send_eof builds the message once and marks it sent; the close's own
        # EOF is built by the same method under the same lock, so exactly one EOF is ever sent.
        message = channel._send_eof()  # type: ignore[attr-defined]
        if message is not None and channel.transport is not None:
            channel.transport._send_user_message(message)  # type: ignore[attr-defined]


def exec_command(client: paramiko.SSHClient, command: str,
                 **kwargs: Any) -> tuple[ChannelStdinFile, ChannelFile, ChannelStderrFile]:
    """``client.exec_command`` whose stdin, when closed, sends its EOF in order (``shutdown_write``)."""
    stdin, stdout, stderr = type(client).exec_command(client, command, **kwargs)
    channel = stdin.channel
    channel.shutdown_write = lambda: shutdown_write(channel)  # type: ignore[method-assign]
    return stdin, stdout, stderr


def install(client: paramiko.SSHClient) -> None:
    """Make every command later run through ``client.exec_command`` close its stdin in order (idempotent)."""
    if getattr(client, _INSTALLED, False):
        return
    client.exec_command = lambda command, **kwargs: exec_command(client, command, **kwargs)  # type: ignore[method-assign]
    setattr(client, _INSTALLED, True)


def install_on(host: Any) -> None:
    """``install`` on a pyinfra ``host``'s SSH client, whichever connector made it: pyinfra's own (plain
    ``pyinfra INVENTORY deploy/site.py``, a team's deploy using ``sparkguard.deploys``) as well as
    sparkguard's. A host without one (local, docker, not connected) is left as it is."""
    client = getattr(host.connector, "client", None)
    if isinstance(client, paramiko.SSHClient):
        install(client)
