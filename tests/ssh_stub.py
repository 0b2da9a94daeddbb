"""STAND-IN for a node's sshd in unit tests: a paramiko SSH server in the test process, over loopback.

Each server takes one connection and answers through the ``paramiko.ServerInterface`` the test
gives it, so a test can make a node that never answers, answers late, or drops the connection at a
chosen moment, which a real sshd cannot be made to do on cue. The sandbox tests do the same faults
on real nodes (tests/sandbox/test_faults.py).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import paramiko
from paramiko.common import MSG_CHANNEL_EOF

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


class Answering(Accepting):
    """Runs every command as `echo ok`, exit 0; then, as sshd does, sends EOF and closes the channel
    ``close_after_s`` later, without waiting for the client's EOF."""

    def __init__(self, close_after_s: float = 0.0) -> None:
        self.close_after_s = close_after_s

    def check_channel_exec_request(self, channel, command):
        def reply():
            time.sleep(0.2)  # after the server's "request accepted", which this method's caller sends on return
            channel.sendall(b"ok\n")
            channel.send_exit_status(0)
            channel.shutdown_write()
            time.sleep(self.close_after_s)
            channel.close()

        threading.Thread(target=reply, daemon=True).start()
        return True


class Dropping(Accepting):
    """Ends the connection (its socket, from the node's side) when a channel is asked for."""

    def __init__(self) -> None:
        self.socket: socket.socket | None = None

    def check_channel_request(self, kind, chanid):
        assert self.socket is not None
        self.socket.shutdown(socket.SHUT_RDWR)
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED


def attach(state, name: str, interface: paramiko.ServerInterface) -> tuple[paramiko.SSHClient, paramiko.Transport]:
    """Connect pyinfra's host ``name`` in ``state`` to a stand-in answered by ``interface``, as pyinfra's own
    connect would have; return the client and the server's transport (to close at the end)."""
    transports: list[paramiko.Transport] = []

    def started(transport: paramiko.Transport, sock: socket.socket) -> None:
        transports.append(transport)
        if isinstance(interface, Dropping):
            interface.socket = sock

    host = state.inventory.get_host(name)
    host.connector.client = client(serve(interface, started))
    host.connected = True
    state.activate_host(host)
    return host.connector.client, transports[0]


def late_eofs(client: paramiko.SSHClient, late_s: float) -> list[tuple[int, int]]:
    """STAND-IN for a thread descheduled at the wrong moment: an EOF that ``client`` sends from any thread
    but its transport's is held up ``late_s`` before it goes out. Returns the record of what ``client``
    sends on its channels, (message type, server's channel number), in the order sent."""
    transport = client.get_transport()
    assert transport is not None
    send = transport._send_user_message
    sent: list[tuple[int, int]] = []

    def held_up(message: paramiko.Message) -> None:
        raw = message.asbytes()
        if raw[0] == MSG_CHANNEL_EOF and threading.current_thread() is not transport:
            time.sleep(late_s)
        sent.append((raw[0], int.from_bytes(raw[1:5], "big")))
        send(message)

    transport._send_user_message = held_up
    return sent
