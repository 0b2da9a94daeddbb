"""A command's stdin EOF never follows its channel's close (sparkguard/run/channel_eof.py).

OpenSSH ends the whole connection when an EOF arrives for a channel it has closed and freed
(channels.c, ``channel_from_packet_id``); the next command then fails with "Unable to open
channel." (CI, 2026-12-07, on a VM test's kept connection). paramiko sends the EOF of a closed
stdin after releasing the channel's lock, so the transport's thread can send the CLOSE of a command
that just ended in between. The gap is a few bytecodes wide; these tests widen it on cue: the
thread that sends the EOF waits before it sends, as a thread descheduled in the gap would.

Real paramiko on both ends; the node is a STAND-IN sshd (tests/ssh_stub.py ``Answering``) that ends
each command the way sshd does (output, exit status, EOF, then CLOSE) without waiting for the client's EOF.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import paramiko
import pytest
from paramiko.common import MSG_CHANNEL_CLOSE, MSG_CHANNEL_EOF
from pyinfra.api import Config, State
from pyinfra.api import Inventory as PyinfraInventory
from pyinfra.connectors.ssh import SSHConnector as PyinfraSSHConnector
from pyinfra.context import ctx_host, ctx_state

from sparkguard.engine import converge
from sparkguard.run import channel_eof, connection, snapshot
from tests import ssh_stub
from tests.vm import harness

LATE_S = 0.5     # how long an EOF sent under the channel's lock is held up (tests/ssh_stub.py late_eofs)
WAIT_S = ssh_stub.NODE_CLOSE_WAIT_S + 5
SETTLE_S = 0.3   # for an EOF sent twice: held up by one keepalive round trip only, both CLOSEs being out


@pytest.fixture
def node():
    """``node(close_after_s, go)``: a logged-in client of an ``Answering`` stand-in; closed at the end."""
    opened: list[paramiko.SSHClient] = []

    def connect(close_after_s: float, go: threading.Event | None = None) -> paramiko.SSHClient:
        opened.append(ssh_stub.client(ssh_stub.serve(ssh_stub.Answering(close_after_s, go))))
        return opened[-1]

    yield connect
    for client in opened:
        client.close()


def ending(sent: list[tuple[int, int]], channel: paramiko.Channel | None = None) -> list[str]:
    """The EOF and CLOSE sent (on ``channel``, or on any channel), in the order sent, once both are out
    (at most WAIT_S) and a little longer, for any EOF sent twice."""
    names = {MSG_CHANNEL_EOF: "EOF", MSG_CHANNEL_CLOSE: "CLOSE"}

    def order() -> list[str]:
        return [names[kind] for kind, chan in sent
                if kind in names and (channel is None or chan == channel.remote_chanid)]

    deadline = time.monotonic() + WAIT_S
    while not {"EOF", "CLOSE"} <= set(order()) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(SETTLE_S)
    return order()


def test_paramiko_alone_sends_the_eof_after_the_close_when_its_thread_is_late(node):
    """The upstream race (paramiko#1115, #1705). When this fails, paramiko orders them itself and
    channel_eof can go."""
    go = threading.Event()
    client = node(0.0, go)
    sent = ssh_stub.late_eofs(client, LATE_S, go.set)
    stdin, stdout, _ = client.exec_command("job")
    stdin.close()   # as pyinfra does, right after the command starts
    assert ending(sent, stdout.channel) == ["CLOSE", "EOF"]


def test_a_late_eof_is_sent_before_the_close(node):
    go = threading.Event()
    client = node(0.0, go)
    sent = ssh_stub.late_eofs(client, LATE_S, go.set)
    stdin, stdout, _ = channel_eof.exec_command(client, "job")
    stdin.close()
    assert ending(sent, stdout.channel) == ["EOF", "CLOSE"]
    assert stdout.read() == b"ok\n" and stdout.channel.recv_exit_status() == 0


def test_an_eof_sent_with_the_close_is_not_sent_again(node):
    client = node(0.0)
    sent = ssh_stub.late_eofs(client, LATE_S)
    stdin, stdout, _ = channel_eof.exec_command(client, "job")
    assert ending(sent, stdout.channel) == ["EOF", "CLOSE"]   # sent by the transport's thread, with its close
    stdin.close()
    assert ending(sent, stdout.channel) == ["EOF", "CLOSE"]


def test_installed_on_a_client_every_command_closes_stdin_in_order_and_install_is_idempotent(node):
    go = threading.Event()
    client = node(0.0, go)
    channel_eof.install(client)
    channel_eof.install(client)
    sent = ssh_stub.late_eofs(client, LATE_S, go.set)
    for _ in range(2):
        stdin, stdout, _ = client.exec_command("job")
        stdin.close()
        assert ending(sent, stdout.channel) == ["EOF", "CLOSE"]


def test_the_connectors_commands_close_their_stdin_in_order(node):
    """pyinfra closes each command's stdin right after starting it, through sparkguard's connector."""
    state = State()
    state.init(connection.inventory([("node", {})]), Config())
    host = state.inventory.get_host("node")
    go = threading.Event()
    host.connector.client = node(0.0, go)
    host.connected = True
    state.activate_host(host)
    sent = ssh_stub.late_eofs(host.connector.client, LATE_S, go.set)
    ok, output = host.run_shell_command("echo ok")
    assert ok and output.stdout == "ok"
    assert ending(sent) == ["EOF", "CLOSE"]


def test_the_vm_harness_closes_a_commands_stdin_in_order(node):
    """The VM harness's kept connection: the stdin is collected when the output is read, just as the
    server closes the channel (the CI failure)."""
    client = node(0.2)
    sent = ssh_stub.late_eofs(client, LATE_S)
    assert harness.VM._exec(SimpleNamespace(name="vm"), client, "job", WAIT_S) == (0, "ok\n", "")
    assert ending(sent) == ["EOF", "CLOSE"]


def test_pyinfras_own_connector_is_put_in_order_when_a_deploy_first_reads_the_node(node, monkeypatch):
    """Plain `pyinfra INVENTORY deploy/site.py`, and a team's deploy using sparkguard.deploys, run on
    pyinfra's own SSH connector: every sparkguard deploy's first read of the node (``current_node_info``)
    puts that connector's commands in order too."""
    state = State()
    state.init(PyinfraInventory((["node"], {})), Config())
    host = state.inventory.get_host("node")
    assert type(host.connector) is PyinfraSSHConnector
    go = threading.Event()
    host.connector.client = node(0.0, go)
    host.connected = True
    state.activate_host(host)
    monkeypatch.setattr(snapshot, "take", lambda name, config: SimpleNamespace(info="the node's facts"))
    with ctx_state.use(state), ctx_host.use(host):
        assert converge.current_node_info(SimpleNamespace()) == "the node's facts"
    sent = ssh_stub.late_eofs(host.connector.client, LATE_S, go.set)
    ok, output = host.run_shell_command("echo ok")
    assert ok and output.stdout == "ok"
    assert ending(sent) == ["EOF", "CLOSE"]


def test_a_host_without_an_ssh_client_is_left_as_it_is():
    local = SimpleNamespace(connector=SimpleNamespace())
    channel_eof.install_on(local)
    unconnected = SimpleNamespace(connector=SimpleNamespace(client=None))
    channel_eof.install_on(unconnected)
    assert vars(local.connector) == {} and unconnected.connector.client is None
