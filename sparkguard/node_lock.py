"""One apply at a time per node: a lock on the node that lives exactly as long as this apply's SSH connection.

Two operators (or an operator and a CI job) applying to one node at once would interleave
staging, validation and restarts; the lock makes the second one refuse, naming who holds it.

Why a channel and not a lock file with a pid: the holder is a `flock` on a root-owned file in
`/run` (not world-writable, gone at reboot) kept by a `cat` reading this connection's own SSH
channel. When the apply ends, is killed (SIGKILL included) or its connection drops, sshd closes
that channel, `cat` sees end of file and the kernel releases the lock. Nothing stale is left to
clean up, and nothing depends on the operator's machine surviving.
"""

from __future__ import annotations

import datetime
import getpass
import os
import shlex
import socket
import string
from dataclasses import dataclass

import paramiko

LOCK_FILE = "/run/sparkguard-apply.lock"
LOCKED = "sparkguard-locked"
BUSY_EXIT = 75  # EX_TEMPFAIL: try again later
# An apply that just ended (or was killed) releases the lock when sshd has noticed: wait that long, not more
# (SPARKGUARD_LOCK_WAIT_S=N: N seconds; a CI job queueing behind another may want more).
WAIT_S = 10
_PRINTABLE = set(string.ascii_letters + string.digits + " .:_@-+")


def holder_description() -> str:
    """Who is applying, as the second operator will read it (printable characters only)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is no reason not to apply
        user = f"uid {os.getuid()}"
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    text = f"sparkguard apply by {user}@{socket.gethostname()} (pid {os.getpid()}) since {when}"
    return "".join(c if c in _PRINTABLE else "?" for c in text)[:200]


def lock_command(holder: str, sudo: bool, wait_s: int | None = None) -> str:
    """The node-side holder: take the lock or say who has it; then keep it until stdin ends."""
    if wait_s is None:
        raw = os.environ.get("SPARKGUARD_LOCK_WAIT_S", "")
        wait_s = int(raw) if raw.isdigit() else WAIT_S
    script = (
        f"umask 077; exec 9<>{LOCK_FILE} || exit 70; "
        f"if flock -w {int(wait_s)} 9; then printf '%s\\n' {shlex.quote(holder)} >{LOCK_FILE}; "
        f"echo {LOCKED}; exec cat >/dev/null; "
        f"else cat {LOCK_FILE}; exit {BUSY_EXIT}; fi"
    )
    command = f"sh -c {shlex.quote(script)}"
    return f"sudo -n {command}" if sudo else command


@dataclass
class NodeLock:
    """A held lock; ``release`` (or the connection ending) lets the next apply in."""

    channel: paramiko.Channel

    def release(self) -> None:
        try:
            self.channel.close()
        except Exception:  # noqa: BLE001 - the connection may be gone already, which releases it too
            pass


class NodeBusy(Exception):
    """Another apply holds the node's lock (or the lock could not be taken)."""


def take(client: paramiko.SSHClient, sudo: bool, holder: str | None = None, timeout: float = 30.0 + WAIT_S) -> NodeLock:
    """Take the node's apply lock over ``client`` (a connected paramiko SSHClient) or raise NodeBusy."""
    transport = client.get_transport()
    if transport is None:
        raise NodeBusy("the SSH connection closed before the lock could be taken")
    channel = transport.open_session()
    channel.settimeout(timeout)
    channel.exec_command(lock_command(holder or holder_description(), sudo))
    received = b""
    try:
        while b"\n" not in received:
            chunk = channel.recv(512)
            if not chunk:
                break
            received += chunk
    except TimeoutError:
        channel.close()
        raise NodeBusy(f"the node did not answer the lock request within {timeout:.0f} s") from None
    first_line = received.split(b"\n", 1)[0].decode(errors="replace").strip()
    if first_line == LOCKED:
        channel.settimeout(None)
        return NodeLock(channel)
    status = channel.recv_exit_status()
    error = channel.recv_stderr(4096).decode(errors="replace").strip()
    channel.close()
    if status == BUSY_EXIT:
        raise NodeBusy(f"another apply is running on this node: {first_line or 'holder unknown'}; "
                       f"it is released when that apply's SSH connection ends")
    raise NodeBusy(f"the node's apply lock {LOCK_FILE} could not be taken (exit {status}: "
                   f"{error or first_line or 'no output'})")
