"""Run a sparkguard deploy through pyinfra's API and say plainly what happened.

Plain ``pyinfra INVENTORY deploy/site.py`` works too; this runner adds what an
operator needs on top: all hosts must be reachable before anything is touched
(no half-applied fleet), a changed host key after a reimage is explained, and
results come back as data (changed operations per host) rather than text.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyinfra.api import Config, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.host import Host
from pyinfra.api.operations import run_ops
from pyinfra.api.state import BaseStateCallback, StateStage
from pyinfra.connectors.sshuserclient.client import get_host_keys

from .. import registry
from ..engine.operations import changed_paths
from ..errors import ConfigError, ConnectError, NodeBusyError, Problem
from ..facts import NodeInfo
from ..inventory.loader import Inventory, InventoryHost
from ..inventory.selection import select_hosts
from . import connection, liveness, node_lock, tunables
from . import context as run_context
from .context import RunContext

# How many of a failed operation's last stderr lines its error quotes: a failed restart's are systemctl's two,
# systemd's verdict and the unit's journal lines (engine.operations.FAILED_ACTION_LOG_LINES).
ERROR_LINES = 9


@dataclass
class HostResult:
    host: str
    operations: int = 0
    changed: int = 0
    changed_names: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: int = 0
    node: NodeInfo | None = None
    # Per-role facts for the operator (Role.describe): e.g. {"guard": "nohang 0.2.0", ...}.
    described: dict[str, str] = field(default_factory=dict)
    # apply --dry --diff: a unified diff per managed file that differs on the node (secrets: a note only).
    diffs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class ApplyResult:
    dry: bool
    hosts: list[HostResult]

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry": self.dry,
            "ok": self.ok,
            "changed": self.changed,
            "hosts": [
                {
                    "host": h.host,
                    "ok": h.ok,
                    "operations": h.operations,
                    "changed": h.changed,
                    "changed_operations": h.changed_names,
                    "errors": h.errors,
                    **({"diffs": h.diffs} if self.dry else {}),
                    "node": None if h.node is None else {
                        "memory_total_bytes": h.node.memory_total_bytes,
                        "device_class": h.node.device_class,
                        "distro": f"{h.node.distro_id} {h.node.distro_version}".strip(),
                        "arch": h.node.arch or None,
                    },
                    **h.described,
                }
                for h in self.hosts
            ],
        }


class Progress(BaseStateCallback):
    """One line per host and operation that changed something or failed, as each operation ends on every host
    (a long apply is otherwise silent until its table); unchanged operations only advance the counter."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.done: dict[str, int] = {}

    def operation_end(self, state: State, op_hash: str) -> None:  # type: ignore[override]
        name = ", ".join(sorted(state.op_meta[op_hash].names))
        for host, ops in state.ops.items():
            if op_hash not in ops or not ops[op_hash].operation_meta.is_complete():
                continue
            meta = ops[op_hash].operation_meta
            self.done[host.name] = self.done.get(host.name, 0) + 1
            what = "FAILED" if meta.did_error() else "changed" if meta.did_change() else None
            if what:
                self.write(f"{host.name} [{self.done[host.name]}/{len(ops)}] {what}: "
                           f"{', '.join(reported_names(name, host.name, op_hash))}")


def reported_names(name: str, host_name: str, op_hash: str) -> list[str]:
    """How a changed operation is reported: by its name, and an operation that writes several files or
    directories names each one it changed ("earlyoom: files /etc/default/earlyoom")."""
    changed = changed_paths(host_name, op_hash)
    return [f"{name} {path}" for path in changed] if changed else [name]


class ConnectErrors(BaseStateCallback):
    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def host_connect_error(self, state: State, host: Host, error: Exception) -> None:  # type: ignore[override]
        self.errors[host.name] = str(error.args[0] if getattr(error, "args", None) else error)


def explain_connect_error(entry: InventoryHost, message: str) -> str:
    """One actionable paragraph per unreachable host."""
    cfg = entry.config
    where = f"{cfg.ssh_user}@{cfg.ssh_host}:{cfg.ssh_port}"
    known_hosts = cfg.ssh_known_hosts_file or "~/.ssh/known_hosts"
    key_entry = cfg.ssh_host if cfg.ssh_port == 22 else f"[{cfg.ssh_host}]:{cfg.ssh_port}"
    if "host key" in message.lower() and "does not match" in message.lower():
        advice = (
            f"the SSH host key of {cfg.ssh_host} has CHANGED since it was recorded in {known_hosts}. "
            f"If the node was reimaged, check the new key's fingerprint out of band (console or BMC: "
            f"`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), then remove the old entry with "
            f"`ssh-keygen -R '{key_entry}' -f {known_hosts}` and run again. If nobody reimaged it, stop: "
            f"the connection may be intercepted"
        )
    elif "no host key" in message.lower():
        advice = (
            f"the host key of {cfg.ssh_host} is not in {known_hosts} and ssh_host_key_checking is 'yes'. "
            f"Fetch it with `ssh-keyscan -p {cfg.ssh_port} {cfg.ssh_host}`, compare its fingerprint with the "
            f"node's console, append it to {known_hosts}, and run again"
        )
    elif "private key" in message.lower():
        advice = (
            f"the SSH key for '{cfg.ssh_user}' could not be loaded ({message}). Check ssh_key "
            f"({cfg.ssh_key or 'agent/default keys'}) in the inventory: a readable private key, unencrypted or in "
            f"the agent"
        )
    elif "authentication" in message.lower():
        advice = (
            f"SSH authentication as '{cfg.ssh_user}' failed ({message}). Check ssh_user and ssh_key "
            f"({cfg.ssh_key or 'agent/default keys'}) in the inventory"
        )
    else:
        advice = (
            f"cannot reach {where} ({message}). Check ssh_host/ssh_port in the inventory, that the node is "
            f"up and that sshd listens there"
        )
    return f"{advice}."


def quiet_pyinfra(verbose: bool) -> None:
    logging.getLogger("pyinfra").setLevel(logging.INFO if verbose else logging.CRITICAL)


def run_deploy(inventory: Inventory, deploy_factory: Callable[[], Callable[[], None]], *, dry: bool = False,
               limit: list[str] | None = None, verbose: bool = False, diff: bool = False,
               skip_unreachable: bool = False, progress: Callable[[str], None] | None = None) -> ApplyResult:
    """Connect to every host, refuse if any is unreachable, then prepare and (unless dry) execute.

    ``skip_unreachable`` (an explicit opt-in): go on with the hosts that answered; the others are FAILED
    in the result, never "ok", and none of them is touched.

    ``diff`` (dry runs only): also read every managed file on the node and keep a unified diff per host."""
    if diff and not dry:
        raise ValueError("diff is for dry runs")
    # This run's own knowledge (snapshots, footprints, lock tokens, diffs): nothing from an earlier run.
    run = run_context.begin(collect_diffs=diff)
    result = _run_deploy(inventory, deploy_factory, run, dry=dry, limit=limit, verbose=verbose,
                         skip_unreachable=skip_unreachable, progress=progress)
    for host_result in result.hosts:
        host_result.diffs = list((run.diffs or {}).get(host_result.host, []))
    return result


def _run_deploy(inventory: Inventory, deploy_factory: Callable[[], Callable[[], None]], run: RunContext, *, dry: bool,
                limit: list[str] | None, verbose: bool, skip_unreachable: bool,
                progress: Callable[[str], None] | None) -> ApplyResult:
    import pyinfra

    pyinfra.is_cli = False
    quiet_pyinfra(verbose)
    connect_timeout, lock_wait, silence_s = (tunables.CONNECT_TIMEOUT.seconds(), tunables.LOCK_WAIT.seconds(),
                                             tunables.SSH_SILENCE.seconds())
    # pyinfra memoizes known_hosts per process; a long-lived caller (tests, a
    # fixed known_hosts after a reimage) must see the file as it is now.
    get_host_keys.cache.clear()
    entries = select_hosts(inventory, limit)
    groups: dict[str, tuple[list[str], dict[str, Any]]] = {
        g: ([m for m in members if any(e.name == m for e in entries)], {})
        for g, members in inventory.groups.items() if g != "all"}
    py_inventory = connection.inventory([(h.name, h.pyinfra_data()) for h in entries], **groups)
    config = Config(CONNECT_TIMEOUT=connect_timeout)
    state = State(check_for_changes=dry)
    errors = ConnectErrors()
    state.init(py_inventory, config)
    state.add_callback_handler(errors)
    if progress is not None:
        state.add_callback_handler(Progress(progress))

    state.set_stage(StateStage.Connect)
    connect_hosts(state, entries, errors)
    watches = liveness.watch_clients({e.name: ssh_client(state, e.name) for e in entries}, silence_s)
    locks: list[node_lock.NodeLock] = []
    try:
        unreachable = {name: explain_connect_error(inventory.host(name), message)
                       for name, message in sorted(errors.errors.items())}
        if unreachable and (not skip_unreachable or len(unreachable) == len(entries)):
            raise ConnectError("\n\n".join(f"host '{name}': {why}" for name, why in unreachable.items())
                               + " Nothing was applied to any node.", hosts=tuple(unreachable))
        reached = [e for e in entries if e.name not in unreachable]
        if not dry:
            locks = lock_hosts(state, reached, lock_wait)

        state.set_stage(StateStage.Prepare)
        with every_host_failed_is_reported(state):  # a connection that ended while the node was read
            add_deploy(state, deploy_factory())  # a PreflightError (a ConfigError) leaves here: nothing ran

        if not dry:
            state.set_stage(StateStage.Execute)
            with every_host_failed_is_reported(state), quiet_greenlets(not verbose):
                run_ops(state)
        return _collect(state, entries, run, dry, unreachable, silent=watches.silent(), silence_s=silence_s)
    finally:
        watches.stop()
        for lock in locks:
            lock.release()
        state.set_stage(StateStage.Disconnect)
        disconnect_all(state)


def connection_problems(entries: list[InventoryHost]) -> list[Problem]:
    """What can be known wrong before dialing: a key or known_hosts file that is not there (exit 2)."""
    problems = []
    for entry in entries:
        cfg = entry.config
        for field_name in ("ssh_key", "ssh_known_hosts_file"):
            value = getattr(cfg, field_name)
            if not value:
                continue
            path = Path(value).expanduser()
            if field_name == "ssh_known_hosts_file" and not path.exists() and cfg.ssh_host_key_checking == "accept-new":
                continue  # created on first use
            if not path.is_file() or not os.access(path, os.R_OK):
                what = "not a readable file" if path.exists() else "no such file"
                problems.append(Problem(entry.name, field_name, value,
                                        f"{what} on this machine (relative paths are relative to the inventory "
                                        f"directory); nothing was applied to any node",
                                        entry.sources.get(field_name, "")))
    return problems


@contextmanager
def every_host_failed_is_reported(state: State) -> Iterator[None]:
    """pyinfra raises "No hosts remaining!" once every host has failed (an operation, or reading a fact while
    the deploy is prepared): a result, which the report gives host by host. Any other PyinfraError, with
    hosts still active, is a bug and goes up as one."""
    try:
        yield
    except PyinfraError:
        if state.active_hosts:
            raise


@contextmanager
def quiet_greenlets(quiet: bool = True) -> Iterator[None]:
    """No greenlet tracebacks on the operator's terminal while pyinfra's greenlets run (unless not ``quiet``).

    gevent prints the traceback of every greenlet that ends in an exception. pyinfra's do when a host
    fails mid-run (a connection lost or cut off: "No hosts remaining!"), and the run reports each host's
    failure itself, in words.
    """
    import gevent

    hub = gevent.get_hub()
    stream = hub.exception_stream
    if quiet:
        hub.exception_stream = None
    try:
        yield
    finally:
        hub.exception_stream = stream


def connect_hosts(state: State, entries: list[InventoryHost], errors: ConnectErrors) -> None:
    """Connect every host; a host that did not connect, for whatever reason, is in ``errors`` (fail closed).

    pyinfra re-raises some connect failures (a key it cannot load) out of ``connect_all`` instead of
    reporting them per host, and leaves the host merely inactive: never let that read as "ok".
    """
    problems = connection_problems(entries)
    if problems:
        raise ConfigError(problems)
    failure = ""
    try:
        with quiet_greenlets():
            connect_all(state)
    except PyinfraError as error:
        failure = str(error)  # "No hosts remaining!" or the first host's own error
    except Exception as error:  # noqa: BLE001 - a connector bug must still fail closed, with its message
        failure = f"{type(error).__name__}: {error}"
    for entry in entries:
        host = state.inventory.get_host(entry.name)
        if not host.connected and entry.name not in errors.errors:
            errors.errors[entry.name] = failure if failure and failure != "No hosts remaining!" else "did not connect"


def ssh_client(state: State, name: str) -> Any:
    """The host's connected paramiko client, or None (not connected, or pyinfra's own @local in a developer's run)."""
    return getattr(state.inventory.get_host(name).connector, "client", None)


def lock_hosts(state: State, entries: list[InventoryHost], wait_s: int) -> list[node_lock.NodeLock]:
    """Take every host's apply lock before anything is prepared; if one is busy, touch none."""
    held: list[node_lock.NodeLock] = []
    busy: list[str] = []
    held_elsewhere = False
    for entry in entries:
        client = ssh_client(state, entry.name)
        if client is None:
            continue
        try:
            lock = node_lock.take(client, entry.config.sudo, wait_s=wait_s)
            node_lock.remember(entry.name, lock)
            held.append(lock)
        except node_lock.NodeBusy as error:
            busy.append(f"host '{entry.name}': {error}")
            held_elsewhere = held_elsewhere or error.held_elsewhere
    if busy:
        for lock in held:
            lock.release()
        again = "; apply again once it is done" if held_elsewhere else ""
        raise NodeBusyError("\n\n".join(busy) + f"\n\nNothing was applied to any node{again}.")
    return held


def describe_host(entry: InventoryHost, node: NodeInfo) -> dict[str, str]:
    """What each enabled role says about this host (Role.describe), for the report."""
    ROLES = registry.roles()

    described: dict[str, str] = {}
    for role in ROLES:
        if role.describe is not None and role.enabled(entry.config):
            described.update(role.describe(entry.config, node))
    return described


def _collect(state: State, entries: list[InventoryHost], run: RunContext, dry: bool,
             unreachable: dict[str, str] | None = None, silent: set[str] | None = None,
             silence_s: float = 0) -> ApplyResult:
    results = []
    for entry in entries:
        if unreachable and entry.name in unreachable:
            results.append(HostResult(entry.name, errors=[f"unreachable, skipped (--skip-unreachable): "
                                                          f"{unreachable[entry.name]} Nothing was applied to it."]))
            continue
        host = state.inventory.get_host(entry.name)
        result = HostResult(entry.name, node=run.node_info.get(entry.name))
        if result.node is not None:
            result.described = describe_host(entry, result.node)
        failed_before = host in state.failed_hosts
        for op_hash in state.get_op_order():
            if op_hash not in state.ops[host]:
                continue
            meta = state.ops[host][op_hash].operation_meta
            name = ", ".join(sorted(state.op_meta[op_hash].names))
            result.operations += 1
            if dry:
                if meta.will_change:
                    result.changed += 1
                    result.changed_names += reported_names(name, host.name, op_hash)
                continue
            if not meta.is_complete():
                result.skipped += 1
                continue
            if meta.did_error():
                detail = " ".join(line.strip() for line in meta.stderr_lines[-ERROR_LINES:] if line.strip())
                paths = changed_paths(host.name, op_hash)
                writing = f" (writing {', '.join(paths)})" if paths else ""
                result.errors.append(f"operation '{name}'{writing} failed: {detail or 'see -v output'}")
            elif meta.did_change():
                result.changed += 1
                result.changed_names += reported_names(name, host.name, op_hash)
        if silent and entry.name in silent:  # first: every error after it is what the closed connection did
            result.errors.insert(0, liveness.silence_paragraph(silence_s))
        elif connection.lost(state, entry.name):
            result.errors.insert(0, connection.lost(state, entry.name))
        if (failed_before or host in state.failed_hosts) and not result.errors:
            result.errors.append("host failed during the run (see -v output)")
        # Fail closed: a host on which nothing ran, or less than was planned, is not "ok".
        if result.operations == 0:
            result.errors.append("no operation was planned or run on this host: it was not applied")
        elif result.skipped and not result.errors:
            result.errors.append(f"{result.skipped} of {result.operations} planned operations did not run")
        if result.errors:
            result.errors.append(
                "Operations listed as changed were applied; the rest were not. Fix the error and apply again."
            )
        results.append(result)
    return ApplyResult(dry=dry, hosts=results)
