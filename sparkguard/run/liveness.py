"""Close the connection to a node whose sshd stops answering, so the run fails there instead of hanging.

A node thrashing under memory pressure (the incident this project exists for), or one whose sshd
is stopped, keeps its kernel's TCP stack alive: the connection stays open, every packet is
acknowledged, and paramiko, under pyinfra (whose commands have no timeout unless an operation
sets one), waits for the command's answer forever. One such node would hold a whole fleet's apply
or audit, with nothing on the screen.

This is OpenSSH's ServerAliveInterval for our connections: every ``interval(silence_s)`` seconds
(10, or a third of a shorter silence) a watcher thread per host sends a ``keepalive@openssh.com``
global request, which any sshd answers (if only to refuse it) from the connection's own process,
also while a long command (apt) runs. A request left unanswered for ``silence_s`` seconds closes
the connection: every wait on it ends, pyinfra fails that host's operation, and the runner names
the host as not answering.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import paramiko

from . import ssh_deadline

INTERVAL_S = 10.0
REQUEST = "keepalive@openssh.com"


def interval(silence_s: float) -> float:
    """How often to ask: every 10 s, and at least three times within a shorter silence."""
    return min(INTERVAL_S, silence_s / 3)


class _Silent(Exception):
    """The deadline closed the connection: the node did not answer in time."""


class Watch:
    """One host's watcher thread; ``went_silent`` once it closed the connection."""

    def __init__(self, name: str, transport: paramiko.Transport, silence_s: float,
                 interval_s: float | None = None) -> None:
        self.name = name
        self.transport = transport
        self.silence_s = silence_s
        self.interval_s = interval(silence_s) if interval_s is None else interval_s
        self.went_silent = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sparkguard-liveness-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            if not self.transport.is_active():
                return
            try:
                with ssh_deadline.closing_at_deadline(self.transport, self.silence_s, _Silent(), self._silent):
                    self.transport.global_request(REQUEST, wait=True)
            except _Silent:
                return
            except Exception:  # noqa: BLE001 - the connection broke under the request: nothing left to watch,
                return  # and the run reports that host's failure itself (a thread's traceback would say nothing more)

    def _silent(self) -> None:
        self.went_silent = True  # before the connection closes: the run reads it once its waits end

    def stop(self) -> None:
        """Stop asking; the thread ends at its next wake-up (or when the connection closes)."""
        self._stopped.set()


class Watches:
    """Every connected host's watch for one run."""

    def __init__(self, watches: Iterable[Watch]) -> None:
        self.watches = list(watches)

    def silent(self) -> set[str]:
        """The hosts whose connection was closed because they stopped answering."""
        return {w.name for w in self.watches if w.went_silent}

    def stop(self) -> None:
        for watch in self.watches:
            watch.stop()


def watch_clients(clients: dict[str, paramiko.SSHClient | None], silence_s: float,
                  interval_s: float | None = None) -> Watches:
    """Start a watch for each host name whose client is connected (others are not SSH, or not connected)."""
    watches = []
    for name, client in clients.items():
        transport = client.get_transport() if client is not None else None
        if transport is not None and transport.is_active():
            watches.append(Watch(name, transport, silence_s, interval_s))
    return Watches(watches)


def silence_paragraph(silence_s: float) -> str:
    """What the run says about a host whose connection a watch closed."""
    return (f"the node stopped answering SSH: a liveness request went unanswered for {silence_s:.0f} s "
            f"(SPARKGUARD_SSH_SILENCE_S), so its connection was closed. A node in this state is usually "
            f"out of memory or hung; its guard should act, or reach it through its console or BMC")
