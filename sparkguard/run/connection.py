"""pyinfra's SSH connector, with a connection that ends mid-run reported as a lost connection, for that host only.

When a node's SSH session ends while pyinfra opens a channel on it (the node rebooted, its sshd
was killed or restarted, a NAT or bastion dropped the connection), paramiko raises ``EOFError``
from ``open_session``. pyinfra expects a broken connection to raise ``OSError`` or
``SSHException`` (which it turns into a failed operation on that host) and lets anything else out
of ``run_ops``: the run then stopped for every host, in the middle, with a Python traceback and no
report (seen in the sandbox fault test that kills the apply's sshd sessions, 2026-12-07; upstream:
pyinfra-dev/pyinfra#1220, open). This connector turns that ``EOFError`` into
``ConnectionAbortedError``, an ``OSError``, so pyinfra fails the one host and goes on with the
others, and it remembers, for the report, that the host's connection is gone and why (pyinfra
alone says only "see -v output").

Its commands also close their stdin so that the EOF can never follow the channel's close, which
makes OpenSSH end the whole connection (``channel_eof``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import paramiko
from pyinfra.api import Inventory as PyinfraInventory
from pyinfra.api import State
from pyinfra.connectors.ssh import SSHConnector as PyinfraSSHConnector

from sparkguard.run import channel_eof

T = TypeVar("T")

LOST = ("the SSH connection to the node ended during the run ({why}): the node rebooted, its sshd was "
        "restarted or killed, or the network dropped the connection")


class SSHConnector(PyinfraSSHConnector):
    """pyinfra's SSH connector; ``lost`` says why its connection ended mid-run ("" while it is up)."""

    lost = ""

    def run_shell_command(self, *args: Any, **kwargs: Any) -> Any:
        if self.client is not None:
            channel_eof.install(self.client)
        return self._guarded(super().run_shell_command, *args, **kwargs)

    def put_file(self, *args: Any, **kwargs: Any) -> Any:
        return self._guarded(super().put_file, *args, **kwargs)

    def get_file(self, *args: Any, **kwargs: Any) -> Any:
        return self._guarded(super().get_file, *args, **kwargs)

    def _guarded(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with self._noting_a_lost_connection():
            result = call(*args, **kwargs)
        if not self._connected():  # a command cut off by the close returns as failed, with nothing raised
            self._note("closed while a command ran")
        return result

    @contextmanager
    def _noting_a_lost_connection(self) -> Iterator[None]:
        try:
            yield
        except EOFError as error:
            self._note(_words(error))
            raise ConnectionAbortedError(LOST.format(why=_words(error))) from error
        except (OSError, paramiko.SSHException) as error:
            # A command's own timeout is an OSError too, and leaves the connection up: only a gone one is noted.
            if not self._connected():
                self._note(_words(error))
            raise

    def _connected(self) -> bool:
        """False once the transport's thread has seen the connection end. It records why (``saved_exception``)
        before it wakes the channels' readers, and marks itself inactive only after: a command woken by the
        close can return before ``is_active()`` turns false."""
        transport = self.client.get_transport() if self.client is not None else None
        return transport is not None and transport.is_active() and transport.saved_exception is None

    def _note(self, why: str) -> None:
        if not self.lost:
            self.lost = LOST.format(why=why)


def _words(error: BaseException) -> str:
    """``EOFError`` says nothing by itself: name it, with paramiko's message where there is one."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else f"{type(error).__name__} from paramiko"


def inventory(hosts: list[tuple[str, dict[str, Any]]], **groups: Any) -> PyinfraInventory:
    """A pyinfra inventory whose SSH hosts use this connector (set before ``State.init`` creates them)."""
    made = PyinfraInventory((hosts, {}), **groups)
    for host in made:
        if host.connector_cls is PyinfraSSHConnector:
            host.connector_cls = SSHConnector
    return made


def lost(state: State, name: str) -> str:
    """Why the host's connection ended mid-run, in words, or "" (connected throughout, or never)."""
    connector = state.inventory.get_host(name).connector
    return connector.lost if isinstance(connector, SSHConnector) else ""
