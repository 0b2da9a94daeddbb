"""Session sandbox: two real Debian nodes booted with systemd-nspawn, torn down after.

Uses its own state dir, inventory dir and loopback /24 (127.0.77.x), so it never
touches an operator's `sparkguard sandbox` nodes on the same machine.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import paramiko
import pytest
import yaml

from sparkguard.dev import sandbox
from sparkguard.run import ssh_deadline
from tests.conftest import require_root_and_tools
from tests.waiting import wait_for  # noqa: F401 - re-exported for the sandbox modules


def net(default: str) -> str:
    """A test's loopback /24. SPARKGUARD_TEST_NET_OFFSET=N shifts every one by N (127.0.77 -> 127.0.(77+N)),
    so a second test run on the same machine (a developer's beside a CI clone's) never meets the first's nodes."""
    offset = int(os.environ.get("SPARKGUARD_TEST_NET_OFFSET", "0") or 0)
    prefix, _, third = default.rpartition(".")
    return f"{prefix}.{int(third) + offset}"


NET = net("127.0.77")


@dataclass
class SandboxHandle:
    state_dir: Path
    inventory_dir: Path
    nodes: list[sandbox.Node]

    @property
    def key(self) -> Path:
        return sandbox.key_path(self.state_dir)

    @property
    def known_hosts(self) -> Path:
        return sandbox.known_hosts_path(self.state_dir)

    def node(self, name: str) -> sandbox.Node:
        return next(n for n in self.nodes if n.name == name)

    def connect(self, name: str, user: str = "root") -> paramiko.SSHClient:
        """A NEW SSH connection to a node (paramiko, strict host keys); the caller closes it."""
        client = paramiko.SSHClient()
        client.load_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(self.node(name).address, username=user, key_filename=str(self.key),
                           look_for_keys=False, allow_agent=False, timeout=10)
        except BaseException:
            client.close()
            raise
        return client

    def ssh(self, name: str, command: str, user: str = "root", timeout: int = 120) -> tuple[int, str, str]:
        """Run a command on a node over a NEW SSH session (paramiko, strict host keys)."""
        try:
            client = self.connect(name, user)
        except paramiko.AuthenticationException as refused:
            if user == "root":
                raise
            raise AssertionError(f"SSH as {user} to {name} refused ({refused}); the node as root sees:\n"
                                 + self.login_diagnostics(name)) from refused
        late = TimeoutError(f"`{command}` did not finish on {name} within {timeout} s")
        try:
            # closed at the deadline: paramiko waits for the request's answer and the exit status unbounded
            with ssh_deadline.closing_at_deadline(client.get_transport(), timeout, late):
                _, stdout, stderr = client.exec_command(command, timeout=timeout)
                rc = stdout.channel.recv_exit_status()
                return rc, stdout.read().decode(), stderr.read().decode()
        finally:
            client.close()

    def login_diagnostics(self, name: str) -> str:
        return self.ssh(name, sandbox.LOGIN_DIAGNOSTICS)[1]

    def inventory_with(self, directory: Path, extra_all_vars: str = "", extra_hosts: str = "") -> Path:
        """A copy of the sandbox inventory with extra ``all: vars:`` and hosts merged in.

        Both are YAML snippets as they would be written in hosts.yml (any indentation);
        mappings merge key by key, so a test's ``recovery:`` block adds to the one the
        sandbox wrote instead of silently replacing it.
        """
        document = yaml.safe_load((self.inventory_dir / "hosts.yml").read_text())
        if extra_all_vars:
            _merge(document["all"]["vars"], yaml.safe_load(textwrap.dedent(extra_all_vars)))
        if extra_hosts:
            hosts = document["all"]["children"]["sandbox"]["hosts"]
            _merge(hosts, yaml.safe_load(textwrap.dedent(extra_hosts)))
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts.yml").write_text(yaml.safe_dump(document, sort_keys=False))
        return directory


def _merge(target: dict, extra: dict) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _require_sandbox_tools() -> None:
    missing = [tool for tool in ("debootstrap", "systemd-nspawn", "ssh-keygen") if not shutil.which(tool)]
    require_root_and_tools("sandbox tests", missing)


def leftovers(state_dir: Path) -> list[str]:
    """Processes and mounts that still reference the sandbox after `down`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(state_dir) in cmdline:
                found.append(f"process {proc.name}: {cmdline}")
    for line in Path("/proc/mounts").read_text().splitlines():
        if str(state_dir) in line:
            found.append(f"mount: {line}")
    return found


@contextmanager
def booted_sandbox(tmp_path_factory, release: str, net: str, nodes: int, arch: str | None = None):
    """Boot nodes in private dirs; on exit tear down and prove nothing is left behind."""
    _require_sandbox_tools()
    state_dir = tmp_path_factory.mktemp(f"sandbox-{release}-state")
    inventory_dir = tmp_path_factory.mktemp(f"sandbox-{release}-inventory")
    try:
        sandbox.up(nodes=nodes, release=release, state_dir=state_dir, inventory_dir=inventory_dir, net=net,
                   log=lambda *_: None, arch=arch)
        box = sandbox.Sandbox.load(state_dir)
        yield SandboxHandle(state_dir, inventory_dir, box.nodes)
    finally:
        box = sandbox.Sandbox.load(state_dir)
        inside = {pid: sandbox.start_time(pid) for node in (box.nodes if box else []) if node.alive()
                  for pid in sandbox.node_processes(node.pid)}
        cgroups = [directory for node in (box.nodes if box else []) for directory in node.cgroups]
        sandbox.down(state_dir, log=lambda *_: None)
        remaining = leftovers(state_dir) + [f"cgroup: {d}" for d in cgroups if Path(d).exists()]
        assert remaining == [], f"sandbox down left things behind: {remaining}"
        # What ran inside a node names no state dir (an emulated node's systemd is "qemu-aarch64 .../systemd").
        survivors = sandbox.still_running(inside)  # by PID and start time: a reused PID is not a survivor
        assert survivors == [], f"sandbox down left processes of its nodes running: {survivors}"
        assert not (inventory_dir / "hosts.yml").exists()


@pytest.fixture(scope="session")
def sandbox_nodes(tmp_path_factory):
    """Two bookworm nodes (earlyoom 1.7), shared by the sandbox tests."""
    with booted_sandbox(tmp_path_factory, "bookworm", NET, 2) as handle:
        yield handle


@pytest.fixture(scope="session")
def trixie_node(tmp_path_factory):
    """One trixie node (earlyoom 1.8.2)."""
    with booted_sandbox(tmp_path_factory, "trixie", net("127.0.78"), 1) as handle:
        yield handle


