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
from paramiko.common import (
    MSG_CHANNEL_CLOSE,
    MSG_CHANNEL_EOF,
    MSG_CHANNEL_FAILURE,
    MSG_CHANNEL_OPEN,
)

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
    ``close_after_s`` later, without waiting for the client's EOF. With ``go``, a command ends only once
    ``go`` is set (at most GO_WAIT_S)."""

    def __init__(self, close_after_s: float = 0.0, go: threading.Event | None = None) -> None:
        self.close_after_s = close_after_s
        self.go = go

    def check_channel_exec_request(self, channel, command):
        def reply():
            time.sleep(0.2)  # after the server's "request accepted", which this method's caller sends on return
            if self.go is not None:
                self.go.wait(GO_WAIT_S)
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


NODE_CLOSE_WAIT_S = 30   # how long a held-up EOF waits for the node's CLOSE of its channel, at most
GO_WAIT_S = 30           # how long an Answering command waits for its go, at most


def late_eofs(client: paramiko.SSHClient, late_s: float,
              on_hold: Callable[[], object] = lambda: None) -> list[tuple[int, int]]:
    """STAND-IN for a thread descheduled at the wrong moment: an EOF that ``client`` sends from any thread
    but its transport's is held up in the gap between building it and sending it.

    - Sent outside the channel's lock (paramiko's own ``shutdown_write``), it is held up until the
      node's CLOSE of the channel has reached the client and the client has sent its own CLOSE (at most
      NODE_CLOSE_WAIT_S each), then for one keepalive round trip, so that the node has handled that
      CLOSE, and freed the channel, before the EOF arrives. The hold goes by what happened, not by a
      clock.
    - Sent under the channel's lock (``sparkguard.run.channel_eof``), it is held up ``late_s``: the
      transport's thread cannot handle the node's messages on that channel meanwhile, so it cannot
      wait for the node's CLOSE. The lock is taken to be held when it cannot be had for ``late_s``.

    ``on_hold`` is called as the hold begins. A command made to end only then is sure to end during
    the hold. One that ends by itself may end, on a loaded runner, before its stdin is closed at all;
    its EOF then goes with the close, and there is no race to show (the CI run of 2026-12-07, where
    the sandbox test's `true` did so).

    Returns the record of the channel messages ``client`` sends, (message type, server's channel
    number), in the order sent."""
    transport = client.get_transport()
    assert transport is not None
    send = transport._send_user_message
    sent: list[tuple[int, int]] = []
    closed_by_node: set[int] = set()
    changed = threading.Condition()

    def node_closed(channel: paramiko.Channel, message: paramiko.Message) -> None:
        with changed:
            closed_by_node.add(channel.remote_chanid)
            changed.notify_all()
        handle_close(channel, message)

    def sent_under_its_lock(channel: int) -> bool:
        """Whether this thread holds the channel's lock: it cannot be had for ``late_s``. A channel already
        unlinked had its close handled meanwhile, which the lock would have kept from happening: no."""
        for linked in transport._channels.values():
            if linked.remote_chanid == channel:
                if not linked.lock.acquire(timeout=late_s):
                    return True
                linked.lock.release()
        return False

    def hold_up(channel: int) -> None:
        on_hold()
        if sent_under_its_lock(channel):
            return   # already held up late_s
        with changed:
            changed.wait_for(lambda: channel in closed_by_node, NODE_CLOSE_WAIT_S)
            changed.wait_for(lambda: (MSG_CHANNEL_CLOSE, channel) in sent, NODE_CLOSE_WAIT_S)
        transport.global_request("keepalive@openssh.com", wait=True)

    def held_up(message: paramiko.Message) -> None:
        raw = message.asbytes()
        channel = int.from_bytes(raw[1:5], "big")
        if raw[0] == MSG_CHANNEL_EOF and threading.current_thread() is not transport:
            hold_up(channel)
        if MSG_CHANNEL_OPEN < raw[0] <= MSG_CHANNEL_FAILURE:   # each names the recipient's channel first
            with changed:
                sent.append((raw[0], channel))
                changed.notify_all()
        send(message)

    handle_close = transport._channel_handler_table[MSG_CHANNEL_CLOSE]
    transport._channel_handler_table = {**transport._channel_handler_table, MSG_CHANNEL_CLOSE: node_closed}
    transport._send_user_message = held_up
    return sent
