"""Local sandbox nodes: real Debian + real systemd, booted with systemd-nspawn.

Each node is a copy of a cached debootstrap rootfs, booted as a container that
shares the host's network namespace. Nodes never clash because each one gets
its own loopback address (all of 127.0.0.0/8 is local) and every listener is
bound to it, the way real nodes bind to their management interface. apt inside
the nodes reaches the Debian registry through the host's network.

Needs root on Linux, debootstrap, systemd-container and ssh-keygen.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import EXIT_CONFIG_ERROR, SparkguardError
from ..hosttools import MIRROR, RELEASES, run_tool
from ..paths import INSTALLED, REPO_ROOT
from ..pyinfra_inventory import write_adapter
from . import node_cgroup
from .emulation import ARCHES, ensure_emulation, host_arch

Log = Callable[..., Any]  # print, or a quiet stand-in

INCLUDE = "systemd,systemd-sysv,dbus,openssh-server,iproute2,python3,procps,sudo,ca-certificates"
DEFAULT_STATE_DIR = Path(os.environ.get("SPARKGUARD_SANDBOX_DIR", "/var/lib/sparkguard/sandbox"))
DEFAULT_CACHE_DIR = Path(os.environ.get("SPARKGUARD_CACHE_DIR", "/var/cache/sparkguard/rootfs"))
# A checkout keeps the sandbox inventory beside the example; an installed sparkguard never writes into
# site-packages, so it keeps it with the sandbox's state.
DEFAULT_INVENTORY_DIR = DEFAULT_STATE_DIR / "inventory" if INSTALLED else REPO_ROOT / "inventory" / "sandbox"
DEFAULT_NET = "127.0.10"
BOOT_TIMEOUT = 90


class SandboxError(SparkguardError):
    exit_code = 1


class SandboxUsageError(SandboxError):
    """A value given to `sandbox up` that cannot be used: nothing was started."""
    exit_code = EXIT_CONFIG_ERROR


def check_net(net: str) -> None:
    """``--net`` names a loopback /24 (127.X.Y): its digits make the nodes' addresses, machine names and
    cgroup names, so nothing else may pass."""
    octets = net.split(".")
    if not (len(octets) == 3 and octets[0] == "127"
            and all(o.isascii() and o.isdigit() and len(o) <= 3 and int(o) <= 255 for o in octets)):
        raise SandboxUsageError(f"sandbox: --net {net!r} is not a loopback /24 prefix; allowed: 127.X.Y with X and "
                                f"Y from 0 to 255 (default {DEFAULT_NET})")


@dataclass
class Node:
    name: str
    machine: str
    address: str
    rootfs: str
    pid: int | None = None
    cgroups: list[str] = field(default_factory=list)   # its own cgroups (node_cgroup), removed at `down`

    def alive(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)


def key_path(state_dir: Path) -> Path:
    """The SSH key every node of a sandbox accepts (root)."""
    return state_dir / "ssh" / "id_ed25519"


def known_hosts_path(state_dir: Path) -> Path:
    """The nodes' host keys, as written at boot (strict checking from the first connection)."""
    return state_dir / "known_hosts"


@dataclass
class Sandbox:
    state_dir: Path
    inventory_dir: Path
    release: str
    net: str
    nodes: list[Node]
    arch: str = field(default_factory=host_arch)

    @property
    def key(self) -> Path:
        return key_path(self.state_dir)

    @property
    def known_hosts(self) -> Path:
        return known_hosts_path(self.state_dir)

    def save(self) -> None:
        record = {"release": self.release, "arch": self.arch, "net": self.net, "inventory_dir": str(self.inventory_dir),
                  "nodes": [asdict(n) for n in self.nodes]}
        (self.state_dir / "sandbox.json").write_text(json.dumps(record, indent=2) + "\n")

    @classmethod
    def load(cls, state_dir: Path) -> Sandbox | None:
        record_file = state_dir / "sandbox.json"
        if not record_file.exists():
            return None
        record = json.loads(record_file.read_text())
        return cls(state_dir, Path(record["inventory_dir"]), record["release"], record["net"],
                   [Node(**n) for n in record["nodes"]], record.get("arch") or host_arch())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot, /proc/PID/stat field 22); None if it is gone.

    With its PID it names one process: PIDs wrap around (pid_max is 32768 on many hosts, and a full test
    run wraps it), so a PID freed by ``down`` can already belong to another program. A full run once
    reported one of a node's PIDs alive after ``down``; a reused PID is the likely reading (not proven).
    """
    try:
        return int(_stat_fields(pid)[19])
    except (OSError, ValueError, IndexError):
        return None


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat from its third field (state) on: what follows the command name, which may hold spaces."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def still_running(processes: dict[int, int | None]) -> list[int]:
    """The PIDs of ``processes`` (PID -> start time) that still run as the same process."""
    return [pid for pid, started in processes.items()
            if started is not None and pid_alive(pid) and start_time(pid) == started]


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run_tool(cmd, SandboxError, "sandbox", "debootstrap, systemd-container and openssh-client "
                    "(the README's first command does)", **kwargs)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise SandboxError("sandbox: needs root (debootstrap and systemd-nspawn); run it with sudo")


def rootfs_name(release: str, arch: str) -> str:
    """The cache entry of a release and architecture: this machine's own keeps the plain release name.

    >>> rootfs_name("bookworm", host_arch()), rootfs_name("trixie", "riscv64")
    ('bookworm', 'trixie-riscv64')
    """
    return release if arch == host_arch() else f"{release}-{arch}"


def ensure_rootfs(release: str, cache_dir: Path = DEFAULT_CACHE_DIR, log: Log = print, arch: str | None = None) -> Path:
    """The cached debootstrap rootfs for a release and architecture, built once (~1 minute; another
    architecture runs debootstrap's second stage under emulation, ~2-3 minutes)."""
    if release not in RELEASES:
        raise SandboxError(f"sandbox: release '{release}' is not supported; choose one of {', '.join(RELEASES)}")
    arch = arch or host_arch()
    if arch not in ARCHES:
        raise SandboxError(f"sandbox: --arch {arch} is not supported; choose one of {', '.join(ARCHES)}")
    ensure_emulation(arch, log)
    target = cache_dir / rootfs_name(release, arch)
    if (target / "usr/sbin/sshd").exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Two sandboxes coming up at once (the test suite's workers, an operator's beside CI) build it once:
    # the second waits for the first and then finds it built.
    with open(cache_dir / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "usr/sbin/sshd").exists():
            return target
        partial = cache_dir / f"{target.name}.partial"
        if partial.exists():
            shutil.rmtree(partial)
        log(f"sandbox: building the {release} {arch} rootfs with debootstrap (cached in {target}) ...")
        _run(["debootstrap", f"--arch={arch}", "--variant=minbase", f"--include={INCLUDE}", release, str(partial),
              MIRROR])
        for key in (partial / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        (partial / "etc/machine-id").write_text("")
        partial.rename(target)
    return target


def _prepare_node(node: Node, template: Path, public_key: str, log: Log, emulated: bool = False) -> None:
    rootfs = Path(node.rootfs)
    if rootfs.exists():
        shutil.rmtree(rootfs)
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    _run(["cp", "-a", "--reflink=auto", str(template), str(rootfs)])
    (rootfs / "etc/hostname").write_text(node.name + "\n")
    (rootfs / "etc/hosts").write_text(f"127.0.0.1 localhost\n{node.address} {node.name}\n")
    (rootfs / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
    host_key = rootfs / "etc/ssh/ssh_host_ed25519_key"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node.name}", "-f", str(host_key)])
    ssh_dir = rootfs / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(public_key)
    os.chmod(ssh_dir / "authorized_keys", 0o600)
    (rootfs / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/ssh/sshd_config.d/00-sandbox.conf").write_text(
        "# sparkguard sandbox: this node's own loopback address, so nodes never clash.\n"
        f"ListenAddress {node.address}\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
    )
    if emulated:
        # qemu user emulation cannot set up two of the namespaces systemd gives a sandboxed unit: a network
        # namespace (PrivateNetwork=: EIO, the netlink requests that bring up its loopback are not translated)
        # and a user namespace (PrivateUsers=: EINVAL). A unit asking for either does not start. On an emulated
        # node every service keeps the node's network and user namespaces; the rest of each unit's sandbox is
        # unchanged, and the unit files are sparkguard's own. A real arm64 machine needs none of this
        # (docs/arm64.md).
        dropin = rootfs / "etc/systemd/system/service.d/50-sparkguard-sandbox-emulation.conf"
        dropin.parent.mkdir(parents=True, exist_ok=True)
        dropin.write_text("# Written by `sparkguard sandbox up --arch`: this node runs under qemu user emulation,\n"
                          "# which cannot set up network or user namespaces (docs/arm64.md).\n"
                          "[Service]\nPrivateNetwork=no\nPrivateUsers=no\n")
    # An unprivileged operator account with sudo, like the laptop workflow's "ops" user.
    (rootfs / "etc/sudoers.d/ops").write_text("ops ALL=(ALL) NOPASSWD:ALL\n")
    os.chmod(rootfs / "etc/sudoers.d/ops", 0o440)
    subprocess.run(["chroot", str(rootfs), "useradd", "-m", "-s", "/bin/bash", "ops"], capture_output=True)
    ops_ssh = rootfs / "home/ops/.ssh"
    ops_ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ops_ssh / "authorized_keys").write_text(public_key)
    subprocess.run(["chroot", str(rootfs), "chown", "-R", "ops:ops", "/home/ops/.ssh"], capture_output=True)


def _boot(node: Node, log_file: Path) -> int:
    """Start the node's systemd-nspawn in cgroups of the node's own (``node_cgroup``); return its PID.

    A shell holds the start until the cgroups are in place, then becomes nspawn (same PID)."""
    handle = log_file.open("ab")
    process = subprocess.Popen(
        ["sh", "-c", 'read -r _ && exec "$@" </dev/null', "sh",
         "systemd-nspawn", "-D", node.rootfs, "-b", "--register=no", "--keep-unit",
         "-M", node.machine, "--console=passive",
         # Like a real node: sshd can set its listener to oom_score_adj -1000.
         "--capability=CAP_SYS_RESOURCE"],
        stdin=subprocess.PIPE, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
    )
    assert process.stdin is not None
    try:
        node.cgroups = node_cgroup.place(process.pid, node.machine)
    except OSError as error:
        process.stdin.close()   # its `read` ends with no line: the shell exits, never starting the node
        process.wait()
        raise SandboxError(f"sandbox: {node.name}: cannot give the node cgroups of its own: {error}") from None
    process.stdin.write(b"go\n")
    process.stdin.close()
    return process.pid


def _wait_for_ssh(node: Node, deadline: float) -> None:
    while time.time() < deadline:
        if not node.alive():
            raise SandboxError(f"sandbox: node {node.name} exited while booting; see its console log")
        try:
            with socket.create_connection((node.address, 22), timeout=1) as conn:
                conn.settimeout(2)
                if conn.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SandboxError(f"sandbox: node {node.name} did not answer SSH on {node.address}:22 within {BOOT_TIMEOUT} s")


# What refuses a non-root login, read as root: pam_nologin's files, the boot jobs still queued, failed units,
# systemd-user-sessions (which removes /run/nologin) and sshd's own words.
LOGIN_DIAGNOSTICS = ("ls -l --time-style=full-iso /run/nologin /etc/nologin 2>&1; systemctl is-system-running; "
                     "systemctl list-jobs --no-pager | head -20; systemctl --failed --no-pager; "
                     "journalctl -b --no-pager -o short-monotonic -u systemd-user-sessions | tail -8; "
                     "journalctl -b --no-pager -n 30 _COMM=sshd")


def _wait_for_boot(box: Sandbox, node: Node, deadline: float) -> None:
    """Return once the node finished booting, as a reimaged machine is before an operator applies to it.

    sshd answers before boot is over; until systemd-user-sessions has run, /run/nologin stands and every
    login but root's is refused, so a node handed out earlier turns away the ops account.
    """
    ssh = ["ssh", "-i", str(box.key), "-o", f"UserKnownHostsFile={box.known_hosts}", "-o", "StrictHostKeyChecking=yes",
           "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", f"root@{node.address}"]
    left = max(1, int(deadline - time.time()))
    try:
        done = subprocess.run([*ssh, f"timeout {left} systemctl is-system-running --wait; test ! -e /run/nologin"],
                              capture_output=True, text=True, timeout=left + 15)
    except subprocess.TimeoutExpired as hung:
        raise SandboxError(f"sandbox: node {node.name} did not answer over SSH while booting") from hung
    if done.returncode == 0:
        return
    try:
        seen = subprocess.run([*ssh, LOGIN_DIAGNOSTICS], capture_output=True, text=True, timeout=30).stdout
    except subprocess.TimeoutExpired:
        seen = "(no answer within 30 s)"
    state = done.stdout.strip() or done.stderr.strip()
    if state not in ("running", "degraded"):
        raise SandboxError(f"sandbox: node {node.name} did not finish booting within {BOOT_TIMEOUT} s "
                           f"(systemctl is-system-running: {state}); the node says:\n{seen}")
    raise SandboxError(f"sandbox: node {node.name} finished booting ({state}) but /run/nologin still refuses "
                       f"non-root logins; the node says:\n{seen}")


def _host_memtotal_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20, 3)
    raise SandboxError("sandbox: cannot read MemTotal")


def _host_kernel_vars() -> dict[str, Any]:
    """Settings the nodes need because they share this host's kernel.

    A kernel built without CONFIG_MAGIC_SYSRQ has no kernel.sysrq: role recovery's
    sysctl validator would (rightly) refuse to manage it on these nodes.
    """
    if Path("/proc/sys/kernel/sysrq").exists():
        return {}
    return {"recovery": {"sysctl": {"sysrq": None}}}


def write_inventory(box: Sandbox) -> Path:
    box.inventory_dir.mkdir(parents=True, exist_ok=True)
    document = {
        "all": {
            "vars": {
                "ssh_user": "root",
                "ssh_key": str(box.key),
                "ssh_known_hosts_file": str(box.known_hosts),
                "ssh_host_key_checking": "yes",
                # nspawn nodes share the host kernel, so they see the host's MemTotal.
                "node": {"memory_total_gib": _host_memtotal_gib(), "device_profile": "cpu-only"},
                **_host_kernel_vars(),
            },
            "children": {"sandbox": {"hosts": {n.name: {"ssh_host": n.address} for n in box.nodes}}},
        }
    }
    header = (f"# Written by `sparkguard sandbox up` ({box.release} {box.arch}, {len(box.nodes)} nodes); rewritten on each up.\n"
              f"# Add vars here to try settings against the sandbox.\n")
    hosts_file = box.inventory_dir / "hosts.yml"
    hosts_file.write_text(header + yaml.safe_dump(document, sort_keys=False))
    write_adapter(box.inventory_dir, str(box.inventory_dir))
    return hosts_file


def up(nodes: int = 1, release: str = "bookworm", state_dir: Path = DEFAULT_STATE_DIR,
       inventory_dir: Path = DEFAULT_INVENTORY_DIR, net: str = DEFAULT_NET, cache_dir: Path = DEFAULT_CACHE_DIR,
       log: Log = print, arch: str | None = None) -> Path:
    """Boot N nodes (reusing running ones) and write their inventory; return its hosts.yml. ``arch``: amd64 or
    arm64 (default: this machine's); another architecture runs under qemu user emulation (sparkguard.emulation)."""
    arch = arch or host_arch()
    if not 1 <= nodes <= 64:
        raise SandboxUsageError(f"sandbox: --nodes {nodes} is out of range; allowed: 1..64")
    check_net(net)
    _require_root()
    existing = Sandbox.load(state_dir)
    if existing and any(n.alive() for n in existing.nodes):
        if (len(existing.nodes) == nodes and existing.release == release and existing.arch == arch
                and all(n.alive() for n in existing.nodes)):
            log(f"sandbox: {nodes} {release} {arch} node(s) already running")
            return write_inventory(existing)
        raise SandboxError(f"sandbox: a different sandbox is running in {state_dir}; run `sparkguard sandbox down` first")
    template = ensure_rootfs(release, cache_dir, log, arch)
    (state_dir / "ssh").mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    box = Sandbox(state_dir, inventory_dir.resolve(), release, net, [], arch)
    if not box.key.exists():
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkguard-sandbox", "-f", str(box.key)])
    public_key = box.key.with_suffix(".pub").read_text()
    prefix = "sg" + net.replace(".", "")[-6:]
    for index in range(1, nodes + 1):
        name = f"node-{index}"
        box.nodes.append(Node(name, f"{prefix}-{name}", f"{net}.{index}",
                              str(state_dir / "nodes" / name / "rootfs")))
    known = []
    try:
        for node in box.nodes:
            _prepare_node(node, template, public_key, log, emulated=arch != host_arch())
            pub = (Path(node.rootfs) / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
            known.append(f"{node.address} {pub[0]} {pub[1]}\n")
        box.known_hosts.write_text("".join(known))
        for node in box.nodes:
            node.pid = _boot(node, Path(node.rootfs).parent / "console.log")
            box.save()
        deadline = time.time() + BOOT_TIMEOUT
        for node in box.nodes:
            _wait_for_ssh(node, deadline)
        for node in box.nodes:
            try:
                _wait_for_boot(box, node, deadline)
            except SandboxError as first:
                # Seen rarely with many nodes booting at once on two cores: one comes up with /run/nologin
                # still there. Boot that node once more, saying so; a second such boot is an error.
                log(f"sandbox: {first}\nsandbox: booting {node.name} again")
                _stop(node)
                node.pid = _boot(node, Path(node.rootfs).parent / "console.log")
                box.save()
                again = time.time() + BOOT_TIMEOUT
                _wait_for_ssh(node, again)
                _wait_for_boot(box, node, again)
    except BaseException:
        down(state_dir, log=lambda *_: None)
        raise
    box.save()
    hosts_file = write_inventory(box)
    log(f"sandbox: {nodes} {release} {arch} node(s) up: " + ", ".join(f"{n.name}={n.address}" for n in box.nodes))
    return hosts_file


def status(state_dir: Path = DEFAULT_STATE_DIR) -> list[dict[str, Any]]:
    box = Sandbox.load(state_dir)
    if box is None:
        return []
    rows = []
    for node in box.nodes:
        reachable = False
        if node.alive():
            try:
                with socket.create_connection((node.address, 22), timeout=1):
                    reachable = True
            except OSError:
                pass
        rows.append({"node": node.name, "address": node.address, "release": box.release, "arch": box.arch,
                     "pid": node.pid, "running": node.alive(), "ssh": reachable})
    return rows


def _stop(node: Node, timeout: float = 20, poweroff_s: float = 20) -> None:
    """Power the node off, waiting ``poweroff_s`` for it; then kill what is left, waiting ``timeout``."""
    if node.pid is None or not node.alive():
        return
    pid = node.pid
    os.kill(pid, signal.SIGTERM)  # nspawn asks the node's systemd to power off cleanly
    deadline = time.time() + poweroff_s
    while time.time() < deadline and node.alive():
        time.sleep(0.2)
    if node.alive():
        # The node's own init is nspawn's child, in a session of its own: a SIGKILL to nspawn's group alone
        # leaves it running, orphaned, with everything under it (seen on arm64 nodes, whose emulated poweroff
        # outlasts the timeout: their systemd and journald stayed after every `down`). Kill what is inside
        # first; a SIGKILL to a PID namespace's init ends everything in it.
        inside = {process: start_time(process) for process in node_processes(pid)}
        for process in inside:
            _kill(process)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while node.alive():
            time.sleep(0.1)
        deadline = time.time() + timeout
        while time.time() < deadline and still_running(inside):
            time.sleep(0.1)
    _reap(pid)


def node_processes(nspawn_pid: int) -> list[int]:
    """Every host PID inside a node: the descendants of its systemd-nspawn (not nspawn itself)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat_fields(int(entry.name))[1])
            except (OSError, ValueError, IndexError):
                pass
    inside: set[int] = set()
    frontier = {nspawn_pid}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - inside
        inside |= frontier
    return sorted(inside)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _unmount_under(path: Path) -> None:
    prefix = str(path.resolve())
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)


def down(state_dir: Path = DEFAULT_STATE_DIR, log: Log = print) -> int:
    """Stop every node, remove their rootfs copies and the sandbox inventory; return nodes stopped."""
    _require_root()
    box = Sandbox.load(state_dir)
    if box is None:
        log("sandbox: nothing to tear down")
        return 0
    # An emulated node's poweroff outlasts 20 s (every arm64 `down` in the test runs took 21 s), and its
    # rootfs is removed right after: it is killed at once instead.
    poweroff_s = 20 if box.arch == host_arch() else 0
    for node in box.nodes:
        _stop(node, poweroff_s=poweroff_s)
        shutil.rmtree(f"/run/systemd/nspawn/propagate/{node.machine}", ignore_errors=True)
        for busy in node_cgroup.remove(node.cgroups):
            log(f"sandbox: {node.name}: cgroup {busy} still has processes; left in place")
    _unmount_under(state_dir)
    shutil.rmtree(state_dir / "nodes", ignore_errors=True)
    for name in ("hosts.yml", "inventory.py"):
        (box.inventory_dir / name).unlink(missing_ok=True)
    (state_dir / "sandbox.json").unlink(missing_ok=True)
    box.known_hosts.unlink(missing_ok=True)
    log(f"sandbox: {len(box.nodes)} node(s) stopped and removed")
    return len(box.nodes)
