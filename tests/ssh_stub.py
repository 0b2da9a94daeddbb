"""STAND-IN for a node's sshd in unit tests: a paramiko SSH server in the test process, over loopback.

Each server takes one connection and answers through the ``paramiko.ServerInterface`` the test
gives it, so a test can make a node that never answers, answers late, or drops the connection at a
chosen moment, which a real sshd cannot be made to do on cue. The sandbox tests do the same faults
on real nodes (tests/sandbox/test_faults.py).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import paramiko

HOST_KEY = paramiko.RSAKey.generate(2048)


class Accepting(paramiko.ServerInterface):
    """Any password, any channel: what the stand-in nodes have in common."""

    def get_allowed_auths(self, username):
        return "password"

    def check_auth_password(self, username, password):
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED


def serve(interface: paramiko.ServerInterface,
          started: Callable[[paramiko.Transport, socket.socket], None] = lambda *_: None) -> int:
    """Listen on a loopback port for one connection answered by ``interface``; return the port.

    ``started`` gets the server's transport and its socket once the connection is accepted (to close
    them at the end, or to cut the connection from the node's side).
    """
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        conn, _ = listener.accept()
        listener.close()
        transport = paramiko.Transport(conn)
        transport.add_server_key(HOST_KEY)
        started(transport, conn)
        transport.start_server(server=interface)

    threading.Thread(target=accept, daemon=True).start()
    return port


def client(port: int) -> paramiko.SSHClient:
    """A paramiko client logged in to the stand-in on ``port``."""
    made = paramiko.SSHClient()
    made.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    made.connect("127.0.0.1", port=port, username="operator", password="x", look_for_keys=False,
                 allow_agent=False, timeout=10)
    return made
