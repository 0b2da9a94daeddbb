"""A node that stops answering: real paramiko on both ends, over loopback.

STAND-IN: the server below is a paramiko SSH server in this process, standing in for a node's
sshd that a crash, memory pressure or SIGSTOP silences while the TCP connection stays open (the
node's kernel still acknowledges every packet, or qemu's user network or a bastion keeps the
connection). paramiko's client waits for the answer to an exec request with no timeout; these
tests fail (by their own join timeout) if nothing ends that wait. The same fault on a real node's
sshd, mid-apply, is in tests/sandbox/test_faults.py.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import paramiko
import pytest

from sparkguard.run import liveness, node_lock, ssh_deadline
from tests import ssh_stub


class Node(ssh_stub.Accepting):
    """Accepts any password; answers an exec request only when ``answer`` is set.

    With ``refusal`` (exit status, stderr) the command prints ``answer``, that on stderr and exits.
    """

    def __init__(self, answer: bytes | None, release: threading.Event,
                 refusal: tuple[int, bytes] | None = None, alive: bool = True) -> None:
        self.answer = answer
        self.release = release
        self.refusal = refusal
        self.alive = alive
        self.channels: list[paramiko.Channel] = []

    def check_global_request(self, kind, msg):
        if not self.alive:
            self.release.wait(60)  # a stalled sshd: the liveness request is never answered
        return False  # what OpenSSH answers to keepalive@openssh.com: a refusal, which is an answer

    def check_channel_exec_request(self, channel, command):
        if self.answer is None:
            self.release.wait(60)  # a crashed node: the request is never answered
            return False
        self.channels.append(channel)
        threading.Thread(target=self._reply, args=(channel,), daemon=True).start()
        return True

    def _reply(self, channel):
        time.sleep(0.2)  # after the server's "request accepted", which this method's caller sends on return
        try:
            channel.sendall(self.answer)  # the holder's first line; it then holds the lock until the end
            if self.refusal:
                status, stderr = self.refusal
                channel.sendall_stderr(stderr)
                channel.send_exit_status(status)
                channel.close()
        except (EOFError, OSError, paramiko.SSHException):
            pass  # the client read what it needed (or its test ended) and hung up first


@pytest.fixture
def node() -> Iterator[callable]:
    """Start a one-connection SSH server; yield a function that connects a client to it."""
    release = threading.Event()
    transports: list[paramiko.Transport] = []
    clients: list[paramiko.SSHClient] = []
    opened: list[paramiko.Channel | None] = []

    def connect(answer: bytes | None, refusal: tuple[int, bytes] | None = None,
                alive: bool = True) -> paramiko.SSHClient:
        def started(transport: paramiko.Transport, _socket) -> None:
            transports.append(transport)
            # The server's channel is kept: a dropped server channel closes itself.
            threading.Thread(target=lambda: opened.append(transport.accept(30)), daemon=True).start()

        client = ssh_stub.client(ssh_stub.serve(Node(answer, release, refusal, alive), started))
        clients.append(client)
        return client

    yield connect
    release.set()
    for client in clients:
        client.close()
    for transport in transports:
        transport.close()


def in_thread(call, limit_s: float = 20):
    """Run ``call``; return (result or exception, seconds), or fail if it is still waiting after ``limit_s``."""
    outcome: dict = {}

    def run():
        started = time.monotonic()
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - the test looks at it
            outcome["value"] = error
        outcome["seconds"] = time.monotonic() - started

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit_s)
    if worker.is_alive():
        pytest.fail(f"still waiting on the silent node after {limit_s} s: no deadline ended the wait")
    return outcome["value"], outcome["seconds"]


def test_paramiko_alone_waits_on_a_silent_node_the_reason_for_the_deadline(node):
    client = node(answer=None)
    ended = []

    def request():
        try:
            client.exec_command("true", timeout=1)  # its timeout bounds reads, not the request
        except (paramiko.SSHException, EOFError) as error:  # which one depends on who noticed the close first
            ended.append(error)

    worker = threading.Thread(target=request, daemon=True)
    worker.start()
    worker.join(1.5)
    assert worker.is_alive(), "paramiko now times out exec requests by itself; the deadline may be unneeded"
    client.close()  # what the deadline does; it ends the wait
    worker.join(10)
    assert not worker.is_alive() and ended


def test_the_deadline_ends_an_exec_request_the_node_never_answers_with_the_callers_error(node):
    client = node(answer=None)
    late = TimeoutError("node-1 did not answer within 1.5 s")

    def run():
        with ssh_deadline.closing_at_deadline(client.get_transport(), 1.5, late):
            client.exec_command("true")
        return "answered"

    error, seconds = in_thread(run)
    assert error is late
    assert isinstance(error.__cause__, (paramiko.SSHException, EOFError))  # what paramiko raised on the close
    assert 1.4 < seconds < 10


def test_a_result_the_deadline_cut_short_is_not_returned(node):
    client = node(answer=None)
    late = TimeoutError("cut short")

    def run():
        with ssh_deadline.closing_at_deadline(client.get_transport(), 1.0, late):
            time.sleep(1.5)  # the connection is closed meanwhile; the block then "finishes"
            return "a partial result"

    error, _ = in_thread(run)
    assert error is late


def test_a_block_that_finishes_in_time_keeps_its_connection(node):
    client = node(answer=b"hello\n")
    with ssh_deadline.closing_at_deadline(client.get_transport(), 1.0, TimeoutError("late")):
        _, stdout, _ = client.exec_command("true", timeout=5)
        assert stdout.readline() == "hello\n"
    time.sleep(1.5)
    assert client.get_transport().is_active()


def test_an_error_in_time_is_the_blocks_own(node):
    client = node(answer=b"hello\n")
    with pytest.raises(KeyError), ssh_deadline.closing_at_deadline(client.get_transport(), 5.0, TimeoutError()):
        raise KeyError("the block's own")


def test_taking_the_lock_on_a_silent_node_says_so_instead_of_hanging(node):
    client = node(answer=None)
    error, seconds = in_thread(lambda: node_lock.take(client, sudo=False, timeout=1.5))
    assert isinstance(error, node_lock.NodeBusy), error
    assert str(error) == "the node did not answer the lock request within 2 s"
    assert seconds < 10


def test_a_lock_taken_in_time_is_kept_past_the_deadline(node):
    client = node(answer=f"{node_lock.LOCKED} 4242 987654\n".encode())
    lock, _ = in_thread(lambda: node_lock.take(client, sudo=False, timeout=1.0))
    assert isinstance(lock, node_lock.NodeLock), lock
    assert lock.token == "4242:987654"
    time.sleep(1.5)
    assert client.get_transport().is_active() and not lock.channel.closed


def test_a_lock_request_that_prints_nothing_says_what_the_node_said(node):
    client = node(answer=b"", refusal=(1, b"sudo: a password is required\n"))
    error, _ = in_thread(lambda: node_lock.take(client, sudo=True, timeout=5))
    assert isinstance(error, node_lock.NodeBusy), error
    assert str(error) == (f"the node's apply lock {node_lock.LOCK_FILE} could not be taken "
                          "(exit 1: sudo: a password is required)" + node_lock.SUDO_HINT)
    assert not error.held_elsewhere


def test_a_node_whose_sshd_stops_answering_has_its_connection_closed_and_is_named(node):
    client = node(answer=None, alive=False)  # a command is running (never answered) and sshd is stalled
    watches = liveness.watch_clients({"node-7": client, "local": None}, silence_s=1.0, interval_s=0.2)
    try:
        error, seconds = in_thread(lambda: client.exec_command("apt-get install earlyoom"))
        assert isinstance(error, (paramiko.SSHException, EOFError)), error
        assert seconds < 10
        assert watches.silent() == {"node-7"}
        assert not client.get_transport().is_active()
    finally:
        watches.stop()


def test_a_node_that_answers_is_left_alone_while_a_long_command_runs(node):
    client = node(answer=None, alive=True)  # the command takes long; sshd still answers
    watch = liveness.Watch("node-1", client.get_transport(), silence_s=1.0, interval_s=0.2)
    try:
        time.sleep(2.5)
        assert client.get_transport().is_active()
        assert not watch.went_silent
    finally:
        watch.stop()


def test_the_silence_paragraph_names_the_wait_and_what_to_do():
    text = liveness.silence_paragraph(120)
    assert "unanswered for 120 s (SPARKGUARD_SSH_SILENCE_S)" in text and "console or BMC" in text


def test_a_short_silence_is_asked_about_at_least_three_times():
    assert liveness.interval(120) == liveness.INTERVAL_S == 10
    assert liveness.interval(5) == pytest.approx(5 / 3)


@pytest.mark.parametrize("quiet", [True, False])
def test_a_host_greenlet_that_fails_prints_no_traceback_unless_verbose(quiet, capsys, monkeypatch):
    """What pyinfra's greenlet for a host cut off mid-operation does: end in PyinfraError("No hosts remaining!").

    gevent prints such a greenlet's traceback on stderr; the run reports the host in words instead.
    """
    import gevent
    from pyinfra.api.exceptions import PyinfraError

    from sparkguard.run.runner import quiet_greenlets

    def host_operation():
        raise PyinfraError("No hosts remaining!")

    # The hub keeps the stderr of the moment it was made, which an earlier test in this process may have
    # captured: this test's stderr is where it prints now, as the operator's terminal is in a run.
    monkeypatch.setattr(gevent.get_hub(), "exception_stream", sys.stderr)
    with quiet_greenlets(quiet):
        gevent.spawn(host_operation).join()
    printed = capsys.readouterr().err
    assert ("Traceback" in printed) is not quiet, printed


def test_a_connection_that_breaks_under_a_request_ends_the_watch_quietly(monkeypatch):
    """The run's own disconnect (or a reset) can close the socket while a request is being written."""
    class Breaking:
        def is_active(self):
            return True

        def global_request(self, kind, wait):
            raise EOFError()

        def close(self):
            pass

    unhandled = []
    monkeypatch.setattr(threading, "excepthook", unhandled.append)
    watch = liveness.Watch("node-1", Breaking(), silence_s=5, interval_s=0.01)
    watch._thread.join(5)
    assert not watch._thread.is_alive() and not watch.went_silent
    assert unhandled == []
