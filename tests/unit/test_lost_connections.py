"""A node's SSH connection that ends mid-run fails that host, with a report, and the other hosts go on.

Real pyinfra (its state, an operation, ``run_ops``) and real paramiko on both ends; the nodes are
STAND-INs (tests/ssh_stub.py): one sshd answers every command, the other drops the connection
when a command's channel is opened, as a node does whose sshd is killed or which reboots between
two commands. The same fault on a real node's sshd, mid-apply, is in tests/sandbox/test_faults.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import paramiko
import pytest
from pyinfra.api import Config, State
from pyinfra.api import Inventory as PyinfraInventory
from pyinfra.api.command import StringCommand
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.operations import server

from sparkguard.audit import run as audit_run
from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run import connection, runner
from sparkguard.run import context as run_context
from sparkguard.run.runner import quiet_greenlets
from tests import ssh_stub
from tests.unit.test_schema import GOOD


@pytest.fixture
def stand_in():
    """``stand_in(state, name, interface)``: host ``name`` connected to a stand-in sshd; all closed at the end."""
    opened: list[tuple[paramiko.SSHClient, paramiko.Transport]] = []

    def attach(state: State, name: str, interface: paramiko.ServerInterface) -> None:
        opened.append(ssh_stub.attach(state, name, interface))

    yield attach
    for client, transport in opened:
        client.close()
        transport.close()


@pytest.fixture
def two_nodes(stand_in):
    """A pyinfra state of two connected hosts, 'dropping' and 'answering'; yields a function of the
    inventory maker (ours or pyinfra's own) that returns the state with one shell operation added."""

    def make(inventory_of) -> State:
        state = State()
        state.init(inventory_of([("dropping", {}), ("answering", {})]), Config())
        stand_in(state, "dropping", ssh_stub.Dropping())
        stand_in(state, "answering", ssh_stub.Answering())
        state.set_stage(StateStage.Prepare)
        add_op(state, server.shell, name="say ok", commands=["echo ok"])
        state.set_stage(StateStage.Execute)
        return state

    return make


def dropping_everywhere(stand_in):
    """A ``connect_hosts`` for the runner or the audit: every host on a stand-in that drops its connection."""
    def connect(state, entries, errors):
        for entry in entries:
            stand_in(state, entry.name, ssh_stub.Dropping())

    return connect


def _raise(error: BaseException):
    def call():
        raise error

    return call


def op_result(state: State, name: str):
    host = state.inventory.get_host(name)
    (op_hash,) = state.get_op_order()
    return host, state.ops[host][op_hash].operation_meta


def test_pyinfra_alone_stops_every_host_with_a_traceback_the_reason_for_the_connector(two_nodes):
    """Fails once pyinfra handles the EOFError itself (pyinfra-dev/pyinfra#1220): the connector can then go."""
    state = two_nodes(lambda hosts: PyinfraInventory((hosts, {})))
    with quiet_greenlets(), pytest.raises(EOFError):
        run_ops(state)


def test_a_dropped_connection_fails_that_host_only_and_says_so(two_nodes):
    state = two_nodes(connection.inventory)
    with quiet_greenlets():
        run_ops(state)  # nothing escapes: the one host fails, the run goes on
    dropped, meta = op_result(state, "dropping")
    assert dropped in state.failed_hosts and meta.did_error()
    answering, meta = op_result(state, "answering")
    assert answering not in state.failed_hosts and meta.is_complete() and not meta.did_error()
    assert meta.stdout_lines == ["ok"]
    said = connection.lost(state, "dropping")
    assert said.startswith("the SSH connection to the node ended during the run (EOFError")
    assert "rebooted" in said
    assert connection.lost(state, "answering") == ""
    # A later command on the gone connection fails on its own terms; the first cause is what is reported.
    with pytest.raises(paramiko.SSHException):
        dropped.run_shell_command(StringCommand("true"))
    assert connection.lost(state, "dropping") == said


def test_a_failed_command_on_a_live_connection_is_no_lost_connection(two_nodes):
    state = two_nodes(connection.inventory)
    connector = state.inventory.get_host("answering").connector
    with pytest.raises(TimeoutError):
        connector._guarded(_raise(TimeoutError("the command's own timeout")))
    assert connector.lost == ""


def test_a_command_cut_off_by_the_close_is_a_lost_connection(two_nodes):
    state = two_nodes(connection.inventory)
    connector = state.inventory.get_host("answering").connector

    def closed_while_running():
        connector.client.close()
        return False, []  # what pyinfra returns for a command whose channel closed under it

    assert connector._guarded(closed_while_running) == (False, [])
    assert connector.lost.endswith("(closed while a command ran): the node rebooted, its sshd was restarted or "
                                    "killed, or the network dropped the connection")


def test_only_ssh_hosts_get_the_connector():
    made = connection.inventory([("node-1", {}), ("@local", {})])
    assert made.get_host("node-1").connector_cls is connection.SSHConnector
    assert made.get_host("@local").connector_cls is not connection.SSHConnector


def test_a_command_woken_by_the_close_before_the_transport_turns_inactive_is_a_lost_connection(two_nodes):
    """paramiko's transport thread records why the connection ended, wakes the channels' readers, and only
    then marks itself inactive: the command can return in between."""
    state = two_nodes(connection.inventory)
    connector = state.inventory.get_host("answering").connector
    transport = connector.client.get_transport()

    def woken_by_the_close():
        transport.saved_exception = EOFError()  # what the thread records first
        return False, []

    assert transport.is_active()
    connector._guarded(woken_by_the_close)
    assert "(closed while a command ran)" in connector.lost


def test_the_report_names_the_lost_connection_first_and_the_other_host_is_applied(two_nodes):
    state = two_nodes(connection.inventory)
    with quiet_greenlets():
        run_ops(state)
    entries = [SimpleNamespace(name="dropping"), SimpleNamespace(name="answering")]
    dropped, answering = runner._collect(state, entries, run_context.begin(), dry=False).hosts
    assert dropped.errors[0] == connection.lost(state, "dropping")
    assert dropped.errors[1].startswith("operation 'say ok' failed")
    assert dropped.errors[-1].startswith("Operations listed as changed were applied")
    assert not answering.errors and answering.changed == 1


def test_the_audit_of_a_node_whose_connection_ends_names_it(inventory_dir, monkeypatch, stand_in):
    """The audit's one probe meets the dropped connection: a failed "ssh: connected" check, in words."""
    monkeypatch.setattr(audit_run, "connect_hosts", dropping_everywhere(stand_in))
    (host,) = audit_run.run_audit(load_inventory(inventory_dir(GOOD))).hosts
    failed = [check for check in host.checks if not check.ok]
    assert [check.name for check in failed] == ["ssh: connected"], failed
    assert failed[0].actual.startswith("the SSH connection to the node ended during the run (EOFError")
    assert failed[0].actual.endswith("Nothing was audited on it.")


@pytest.mark.parametrize("hosts", [1, 2])
def test_a_connection_that_ends_while_the_apply_reads_the_node_is_a_failed_host_not_a_traceback(
        hosts, inventory_dir, monkeypatch, stand_in):
    """The cut lands while the deploy is prepared (the one probe that reads the node, right after the lock).
    pyinfra fails the host: once none is left it raises "No hosts remaining!" out of the deploy (the run
    reports it host by host), and a host failed while another is still to be read has nothing planned from
    facts it never read (no preflight verdict on them either)."""
    monkeypatch.setattr(runner, "connect_hosts", dropping_everywhere(stand_in))
    monkeypatch.setattr(runner, "lock_hosts", lambda *_: [])  # the lock's own loss is node_lock's (test_silent_nodes)
    text = GOOD + ("    spark-02:\n      ssh_host: 192.0.2.12\n" if hosts == 2 else "")
    result = runner.run_deploy(load_inventory(inventory_dir(text)), site_deploy)
    assert len(result.hosts) == hosts
    for host in result.hosts:
        assert not host.ok and host.changed == 0 and host.operations == 0, host
        assert host.errors[0].startswith("the SSH connection to the node ended during the run (EOFError"), host.errors
        assert host.errors[1] == "no operation was planned or run on this host: it was not applied"


def test_only_no_hosts_remaining_is_a_result_any_other_pyinfra_error_goes_up():
    with runner.every_host_failed_is_reported(SimpleNamespace(active_hosts=set())):
        raise PyinfraError("No hosts remaining!")
    with pytest.raises(PyinfraError, match="a bug"), \
            runner.every_host_failed_is_reported(SimpleNamespace(active_hosts={"spark-01"})):
        raise PyinfraError("a bug in an operation's arguments")
