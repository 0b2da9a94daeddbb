"""One apply at a time per node: a lock on the node that lives exactly as long as this apply's SSH connection.

Two operators (or an operator and a CI job) applying to one node at once would interleave
staging, validation and restarts; the lock makes the second one refuse, naming who holds it.

Why a channel and not a lock file with a pid: the holder is a `flock` on a root-owned file in
`/run` (not world-writable, gone at reboot) kept by a `cat` reading this connection's own SSH
channel. When the apply ends, is killed (SIGKILL included) or its connection drops, sshd closes
that channel, `cat` sees end of file and the kernel releases the lock. Nothing stale is left to
clean up, and nothing depends on the operator's machine surviving.

The holder also fences the apply's own commands. A command keeps running on the node when the apply
that sent it dies, so a file's check still running there could otherwise rename it into place later,
behind the next apply's back. The holder prints its pid and start time (its ``token``); a fenced step
(``fenced``) runs only while that very process still holds the lock, and under a second lock
(``COMMIT_FILE``) that the next apply's holder takes once, right after its own lock: a fenced step has
either finished before the next apply reads the node, or it finds its holder gone and does nothing.
"""

from __future__ import annotations

import datetime
import getpass
import os
import re
import shlex
import socket
import string
from dataclasses import dataclass

import paramiko

from . import context as run_context
from . import ssh_deadline, tunables

LOCK_FILE = "/run/sparkguard-apply.lock"
COMMIT_FILE = "/run/sparkguard-commit.lock"
LOST_EXIT = 75  # a fenced step found its apply gone
LOCKED = "sparkguard-locked"
BUSY_EXIT = 75  # EX_TEMPFAIL: try again later
# sudo -n refused (a rule that asks for a password, or none at all): what the operator must change.
SUDO_HINT = ("; with `sudo: true` the SSH user needs sudo without a password on the node (a NOPASSWD rule, "
             "for example in /etc/sudoers.d/): sparkguard runs `sudo -n` and never types a password")
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
        wait_s = tunables.LOCK_WAIT.seconds()
    script = (
        f"umask 077; exec 9<>{LOCK_FILE} || exit 70; "
        f"if flock -w {int(wait_s)} 9; then printf '%s\\n' {shlex.quote(holder)} >{LOCK_FILE}; "
        f"exec 8>>{COMMIT_FILE} && flock -w 30 8 && exec 8>&- || exit 70; "
        f"echo {LOCKED} $$ $(cut -d' ' -f22 /proc/$$/stat); exec cat >/dev/null; "
        f"else cat {LOCK_FILE}; exit {BUSY_EXIT}; fi"
    )
    command = f"sh -c {shlex.quote(script)}"
    return f"sudo -n {command}" if sudo else command


@dataclass
class NodeLock:
    """A held lock; ``release`` (or the connection ending) lets the next apply in."""

    channel: paramiko.Channel
    token: str | None = None  # the holder's "pid:start time" on the node (``fenced``), if it said

    def release(self) -> None:
        tokens = run_context.current().lock_tokens
        for name, token in list(tokens.items()):
            if token == self.token:
                del tokens[name]
        try:
            self.channel.close()
        except Exception:  # noqa: BLE001 - the connection may be gone already, which releases it too
            pass


_TOKEN = re.compile(r"[0-9]{1,10}:[0-9]{1,20}")


def remember(host_name: str, lock: NodeLock) -> None:
    """This run's operations on ``host_name`` are fenced by ``lock``."""
    if lock.token:
        run_context.current().lock_tokens[host_name] = lock.token


def fence_token(host_name: str) -> str | None:
    """The token of the lock this run holds on ``host_name`` (None: no lock, e.g. plain ``pyinfra``)."""
    return run_context.current().lock_tokens.get(host_name)


def fence_setup() -> str:
    """The shell step that opens the commit lock for ``fenced`` steps (descriptor 8)."""
    return f"exec 8>>{shlex.quote(COMMIT_FILE)}"


def fenced(token: str, step: str) -> str:
    """``step`` (a shell command) run only while the holder ``token`` still holds the node's apply lock."""
    if not _TOKEN.fullmatch(token):
        raise ValueError(f"not a lock holder token: {token!r}")
    pid, start = token.split(":")
    lost = shlex.quote("sparkguard: this apply no longer holds the node's lock (killed or disconnected); "
                       "nothing more goes live")
    held = (f"[ \"$(readlink /proc/{pid}/fd/9)\" = {shlex.quote(LOCK_FILE)} ] && "
            f"[ \"$(cut -d' ' -f22 /proc/{pid}/stat 2>/dev/null)\" = {start} ]")
    return (f"{{ flock -w 30 8 && {{ {held} || {{ echo {lost} >&2; exit {LOST_EXIT}; }}; }} && {step} && "
            f"flock -u 8; }}")


class NodeBusy(Exception):
    """Another apply holds the node's lock (``held_elsewhere``), or the lock could not be taken."""

    def __init__(self, message: str, held_elsewhere: bool = False) -> None:
        super().__init__(message)
        self.held_elsewhere = held_elsewhere


def take(client: paramiko.SSHClient, sudo: bool, holder: str | None = None, wait_s: int | None = None,
         timeout: float | None = None) -> NodeLock:
    """Take the node's apply lock over ``client`` (a connected paramiko SSHClient) or raise NodeBusy.

    ``wait_s``: how long to wait for another apply's lock (default: ``SPARKGUARD_LOCK_WAIT_S``);
    ``timeout``: for the node's answer at all (default: 30 s more than that).

    A node that stops answering within ``timeout`` seconds has its connection closed (paramiko
    itself would wait for the answer to the request forever) and is reported as not answering;
    the run then touches no node (``runner.lock_hosts``).
    """
    wait_s = tunables.LOCK_WAIT.seconds() if wait_s is None else wait_s
    timeout = 30.0 + wait_s if timeout is None else timeout
    transport = client.get_transport()
    if transport is None:
        raise NodeBusy("the SSH connection closed before the lock could be taken")
    silent = NodeBusy(f"the node did not answer the lock request within {timeout:.0f} s")
    with ssh_deadline.closing_at_deadline(transport, timeout, silent):
        try:
            first_line, channel = _request(transport, lock_command(holder or holder_description(), sudo, wait_s), timeout)
            word, *holder_id = first_line.split() or [""]
            if word == LOCKED:
                channel.settimeout(None)
                token = ":".join(holder_id)
                return NodeLock(channel, token if _TOKEN.fullmatch(token) else None)
            status = channel.recv_exit_status()
            error = channel.recv_stderr(4096).decode(errors="replace").strip()
            channel.close()
        except TimeoutError:  # the channel's own read timeout
            raise silent from None
        except (EOFError, OSError, paramiko.SSHException) as failure:
            raise NodeBusy(f"the SSH connection ended while the lock was being taken "
                           f"({type(failure).__name__}: {failure or 'no reason given'})") from None
    if status == BUSY_EXIT:
        raise NodeBusy(f"another apply is running on this node: {first_line or 'holder unknown'}; "
                       f"it is released when that apply's SSH connection ends", held_elsewhere=True)
    hint = SUDO_HINT if sudo and error.startswith("sudo:") else ""
    raise NodeBusy(f"the node's apply lock {LOCK_FILE} could not be taken (exit {status}: "
                   f"{error or first_line or 'no output'}){hint}")


def _request(transport: paramiko.Transport, command: str, timeout: float) -> tuple[str, paramiko.Channel]:
    """Send the holder command; return the first line it printed and its channel."""
    channel = transport.open_session(timeout=timeout)
    channel.settimeout(timeout)
    channel.exec_command(command)
    received = b""
    while b"\n" not in received:
        chunk = channel.recv(512)
        if not chunk:
            break
        received += chunk
    return received.split(b"\n", 1)[0].decode(errors="replace").strip(), channel
