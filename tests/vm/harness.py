"""qemu VM nodes for tests that need the node's own kernel.

nspawn sandbox nodes (sandbox.py) share the host's kernel, so swap, sysctls,
the watchdog, reboots and kernel crashes cannot be tried there without
changing the host. A VM has its own kernel: this module builds a cached
Debian disk image once and boots throw-away copies of it under qemu (TCG:
this machine has no usable KVM).

Image (cached in /var/cache/sparkguard/vm/<release>-<kernel>-v<N>/, SPARKGUARD_VM_CACHE
overrides the parent directory)::

    root.img                  pristine ext4 root disk (3 GiB, sparse); never booted
    vmlinuz, initrd.img       the image's own Debian cloud kernel, booted with -kernel
    id_ed25519(.pub)          the client key root accepts (generated per cache)
    ssh_host_ed25519_key.pub  the VM's host key (pre-generated, so known_hosts is exact)
    image.json                release, kernel version and flavour, build time

Each VM boots a sparse copy of root.img plus its own swap disk (a second
virtio disk, mkswap'ed on the host with LABEL=sgswap and listed in the VM's
fstab, so swap is on at boot). SSH is forwarded from 127.0.0.1:<free port>
only. qemu keeps running across guest reboots and kernel panics (panic=5, no
-no-reboot); every qemu this module starts is killed on stop(), at interpreter
exit, and by the kernel if the starting process dies (PR_SET_PDEATHSIG).

Needs root (debootstrap, chroot, mke2fs -d with root-owned files),
debootstrap, qemu-system-x86, e2fsprogs, util-linux and ssh-keygen.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko
import yaml

from sparkguard.errors import SparkguardError
from sparkguard.hosttools import MIRROR, RELEASES, run_tool
from sparkguard.pyinfra_inventory import write_adapter
from sparkguard.run import channel_eof, ssh_deadline

IMAGE_FORMAT = 1  # bump when the image recipe changes: old caches are then ignored
INCLUDE = ",".join([
    "systemd", "systemd-sysv", "dbus", "openssh-server", "iproute2", "python3", "procps", "sudo",
    "ca-certificates", "udev", "kmod", "util-linux",
])
# Kernel flavours. "cloud" boots fastest and has softdog, but no i6300esb driver
# (CONFIG_I6300ESB_WDT is not set); "generic" has both, for watchdog=True VMs.
KERNELS = {"cloud": "linux-image-cloud-amd64", "generic": "linux-image-amd64"}
# Image variants: packages baked in after debootstrap, so a test never waits for apt under TCG.
# "incident": the seed's node as shipped: the real Debian docker engine and the monitoring packages
# (installed, not configured: the control arm of bench/incident runs them as Debian ships them), plus
# a trainer rootfs (python3 and what it links) for `docker import` (no registry here).
VARIANTS: dict[str, tuple[str, ...]] = {
    "": (),
    # apparmor: the cloud kernel has AppArmor on, and dockerd loads its default profile with apparmor_parser.
    # earlyoom: installed only to spare the treatment's apply an `apt-get update` and an install under TCG
    # (about 20 s of the replay phase, which runs alone); disabled (VARIANT_DISABLED), so that the control
    # arm, like the seed's node, runs no guard. The apply configures, enables and starts it as on any node.
    "incident": ("docker.io", "apparmor", "prometheus", "prometheus-node-exporter", "prometheus-alertmanager",
                 "earlyoom"),
}
# Units a variant's packages enable that its nodes must boot without.
VARIANT_DISABLED: dict[str, tuple[str, ...]] = {"incident": ("earlyoom.service",)}
TRAINER_TAR = "/var/lib/sparkguard-vm/trainer-rootfs.tar"
# python3 and every shared object it and its C modules link: a trainer image with no registry.
# Real paths only (merged /usr: /lib and /lib64 are links), so docker's extraction never walks a link.
TRAINER_SCRIPT = ("set -e; cd /; files=$( (ldd /usr/bin/python3.11; for so in /usr/lib/python3.11/lib-dynload/*.so; "
    "do ldd $so; done) | awk '/=>/ {print $3} /^\\t\\// {print $1}' | sort -u | while read -r p; do "
    # the soname link (libz.so.1) where its directory really is, and the file it names
    "echo \"$(readlink -f \"$(dirname \"$p\")\")/$(basename \"$p\")\"; readlink -f \"$p\"; done "
    "| sed 's|^/||' | sort -u); "
    f"tar -cf {TRAINER_TAR} --exclude=usr/lib/python3.11/test bin lib lib64 usr/bin/python3 "
    "usr/bin/python3.11 usr/bin/dash usr/bin/sh usr/lib/python3.11 $files")

ROOT_SIZE = "3G"
SWAP_LABEL = "sgswap"
HOSTNAME = "sgvm"
DEFAULT_CACHE_DIR = Path("/var/cache/sparkguard/vm")
QEMU = "qemu-system-x86_64"
# Tried and left out: mitigations=off. Two A/B boots of the same image gave no difference beyond the noise
# (300 forks + 20 systemctl: 12-17 s either way); reboots vary far more (55-158 s), with soft lockups of
# 20-27 s logged by the guest during the boot after a reboot.
KERNEL_APPEND = "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=5"
SOFT_LOCKUP = re.compile(r"soft lockup - CPU#\d+ stuck for (?P<seconds>\d+)s! \[[^\]]*\]")


class VMError(SparkguardError):
    exit_code = 1


def cache_dir() -> Path:
    return Path(os.environ.get("SPARKGUARD_VM_CACHE") or DEFAULT_CACHE_DIR)


def _run(cmd: list[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    return run_tool(cmd, VMError, "vm", "debootstrap, qemu-system-x86, e2fsprogs and openssh-client "
                    "(./dev.sh install does)", tail=1500, timeout=timeout, **kwargs)


def missing_tools() -> list[str]:
    """Host tools the VM harness needs that are not installed."""
    tools = ("debootstrap", "chroot", "mke2fs", "mkswap", QEMU, "ssh-keygen")
    return [tool for tool in tools if not shutil.which(tool)]


# --------------------------------------------------------------------------- image


@dataclass(frozen=True)
class ImagePaths:
    dir: Path

    @property
    def root(self) -> Path:
        return self.dir / "root.img"

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"

    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def host_key_pub(self) -> Path:
        return self.dir / "ssh_host_ed25519_key.pub"

    @property
    def meta(self) -> dict:
        return json.loads((self.dir / "image.json").read_text())

    def complete(self) -> bool:
        return all(p.exists() for p in (self.root, self.kernel, self.initrd, self.key, self.host_key_pub,
                                        self.dir / "image.json"))


def _configure_rootfs(rootfs: Path, client_pub: str, host_key: Path) -> None:
    (rootfs / "etc/hostname").write_text(HOSTNAME + "\n")
    (rootfs / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME}\n")
    # Empty: systemd generates a fresh machine-id on the VM's first boot.
    (rootfs / "etc/machine-id").write_text("")
    (rootfs / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    (rootfs / "etc/fstab").write_text(
        "# sparkguard VM image\n"
        "/dev/vda / ext4 rw,errors=remount-ro 0 0\n"
        f"LABEL={SWAP_LABEL} none swap sw 0 0\n"
    )
    # Slirp's DNS proxy (qemu user networking); nothing in the image rewrites resolv.conf.
    resolv = rootfs / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    resolv.write_text("nameserver 10.0.2.3\n")
    network = rootfs / "etc/systemd/network"
    network.mkdir(parents=True, exist_ok=True)
    (network / "10-eth0.network").write_text("[Match]\nName=eth0\n\n[Network]\nDHCP=ipv4\n")
    # Host key: pre-generated so the harness writes an exact known_hosts line.
    for old in (rootfs / "etc/ssh").glob("ssh_host_*"):
        old.unlink()
    shutil.copy2(host_key, rootfs / "etc/ssh/ssh_host_ed25519_key")
    shutil.copy2(host_key.with_name(host_key.name + ".pub"), rootfs / "etc/ssh/ssh_host_ed25519_key.pub")
    os.chmod(rootfs / "etc/ssh/ssh_host_ed25519_key", 0o600)
    (rootfs / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/ssh/sshd_config.d/00-sgvm.conf").write_text(
        "# sparkguard VM image\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "UseDNS no\n"
    )
    ssh_dir = rootfs / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(client_pub)
    os.chmod(ssh_dir / "authorized_keys", 0o600)
    _run(["chroot", str(rootfs), "systemctl", "enable", "ssh.service", "systemd-networkd.service"])
    # Boot time under TCG is precious: nothing periodic fires during a test.
    for unit in ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer",
                 "systemd-networkd-wait-online.service"):
        subprocess.run(["chroot", str(rootfs), "systemctl", "mask", unit], capture_output=True)
    # An unprivileged operator account with passwordless sudo, like sandbox nodes' "ops".
    subprocess.run(["chroot", str(rootfs), "useradd", "-m", "-s", "/bin/bash", "ops"], capture_output=True)
    (rootfs / "etc/sudoers.d/ops").write_text("ops ALL=(ALL) NOPASSWD:ALL\n")
    os.chmod(rootfs / "etc/sudoers.d/ops", 0o440)
    ops_ssh = rootfs / "home/ops/.ssh"
    ops_ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ops_ssh / "authorized_keys").write_text(client_pub)
    subprocess.run(["chroot", str(rootfs), "chown", "-R", "ops:ops", "/home/ops/.ssh"], capture_output=True)
    _run(["chroot", str(rootfs), "apt-get", "clean"])


def _remove_tree(path: Path) -> None:
    """rmtree a (partial) rootfs, after unmounting what debootstrap may have left mounted in it."""
    if not path.exists():
        return
    prefix = str(path.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)
    still = [m for m in (line.split()[1] for line in Path("/proc/mounts").read_text().splitlines())
             if m.startswith(prefix)]
    if still:
        raise VMError(f"vm: cannot unmount {', '.join(still)}; remove {path} by hand")
    shutil.rmtree(path)


def _install_variant(rootfs: Path, variant: str) -> None:
    """Bake a variant's packages (and, for "incident", the trainer rootfs) into the image."""
    packages = VARIANTS[variant]
    if not packages:
        return
    proc = rootfs / "proc"
    _run(["mount", "-t", "proc", "proc", str(proc)])
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["chroot", str(rootfs), "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
             timeout=1800, env=env)
        # Stock Debian enables and would start them at boot: the control arm wants them as Debian ships
        # them, the treatment lets sparkguard configure them; docker starts on demand (socket) either way.
        disabled = VARIANT_DISABLED.get(variant, ())
        if disabled:
            _run(["chroot", str(rootfs), "systemctl", "disable", *disabled])
        _run(["chroot", str(rootfs), "apt-get", "clean"])
        tar = rootfs / TRAINER_TAR.lstrip("/")
        tar.parent.mkdir(parents=True, exist_ok=True)
        _run(["chroot", str(rootfs), "sh", "-c", TRAINER_SCRIPT], timeout=600)
    finally:
        subprocess.run(["umount", "-l", str(proc)], capture_output=True)


def _build(partial: Path, release: str, kernel: str, started: float, log, variant: str = "") -> str:
    """Build the image's files in ``partial``; return the kernel version."""
    partial.mkdir()
    rootfs = partial / "rootfs"
    log(f"vm: building the {release} VM image, {kernel} kernel (in {partial}) ...")
    _run(["debootstrap", "--variant=minbase", f"--include={INCLUDE},{KERNELS[kernel]}", release, str(rootfs),
          MIRROR],
         timeout=1800)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkguard-vm", "-f", str(partial / "id_ed25519")])
    host_key = partial / "ssh_host_ed25519_key"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{HOSTNAME}", "-f", str(host_key)])
    _configure_rootfs(rootfs, (partial / "id_ed25519.pub").read_text(), host_key)
    _install_variant(rootfs, variant)
    host_key.unlink()  # only the VM needs the private half; the .pub stays for known_hosts
    kernels = sorted((rootfs / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise VMError(f"vm: debootstrap installed no kernel in {rootfs}/boot")
    version = kernels[-1].name[len("vmlinuz-"):]
    initrd = rootfs / "boot" / f"initrd.img-{version}"
    if not initrd.exists():
        raise VMError(f"vm: no initrd for kernel {version} in {rootfs}/boot")
    shutil.copy2(kernels[-1], partial / "vmlinuz")
    shutil.copy2(initrd, partial / "initrd.img")
    _run(["mke2fs", "-q", "-t", "ext4", "-L", "sgroot", "-d", str(rootfs), str(partial / "root.img"), ROOT_SIZE],
         timeout=600)
    _remove_tree(rootfs)
    (partial / "image.json").write_text(json.dumps({
        "release": release, "format": IMAGE_FORMAT, "kernel": version, "flavour": kernel, "variant": variant,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": round(time.monotonic() - started, 1),
    }, indent=2) + "\n")
    return version


def ensure_image(release: str = "bookworm", kernel: str = "cloud", cache: Path | None = None,
                 log=print, variant: str = "") -> ImagePaths:
    """The cached VM image for a release, kernel flavour and variant, built once (a minute cold; a few with
    a variant's packages)."""
    if release not in RELEASES:
        raise VMError(f"vm: release '{release}' is not supported; choose one of {', '.join(RELEASES)}")
    if kernel not in KERNELS:
        raise VMError(f"vm: kernel '{kernel}' is not supported; choose one of {', '.join(KERNELS)}")
    if variant not in VARIANTS:
        raise VMError(f"vm: variant '{variant}' is not known; choose one of {', '.join(v or '(none)' for v in VARIANTS)}")
    cache = Path(cache) if cache else cache_dir()
    # The variant's package list is part of the name: a changed recipe never reuses an old cache.
    recipe = " ".join(VARIANTS[variant]) + TRAINER_SCRIPT + " ".join(VARIANT_DISABLED.get(variant, ()))
    packages = hashlib.sha256(recipe.encode()).hexdigest()[:8] if variant else ""
    name = f"{release}-{kernel}{'-' + variant + '-' + packages if variant else ''}-v{IMAGE_FORMAT}"
    image = ImagePaths(cache / name)
    if image.complete():
        return image
    if os.geteuid() != 0:
        raise VMError("vm: building the VM image needs root (debootstrap, chroot, mke2fs -d)")
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building the same image
        if image.complete():
            return image
        started = time.monotonic()
        partial = cache / f"{name}.partial"
        _remove_tree(partial)
        _remove_tree(image.dir)  # incomplete leftovers: never reuse them
        try:
            version = _build(partial, release, kernel, started, log, variant)
        except BaseException:
            try:
                _remove_tree(partial)  # an interrupted build is never reused, nor left mounted
            except Exception:
                pass
            raise
        partial.rename(image.dir)
        log(f"vm: image built in {time.monotonic() - started:.0f} s (kernel {version})")
    return image


# --------------------------------------------------------------------------- VMs

_LIVE: set[VM] = set()


def _kill_all() -> None:
    for vm in list(_LIVE):
        vm.kill()


atexit.register(_kill_all)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the qemu child: SIGKILL it if the process that started it dies (no orphaned qemu)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VM:
    """One qemu VM booted from a copy of the cached image.

    ``start()`` copies the disk and boots; ``wait_for_ssh()`` waits for sshd;
    ``ssh()`` runs a command over a fresh paramiko session (strict host key);
    ``reboot()`` / ``crash()`` / ``wait_for_reboot()`` survive guest reboots;
    ``stop()`` powers off and always leaves no qemu behind.
    """

    def __init__(self, image: ImagePaths, run_dir: Path, *, name: str = "vm-1", memory_mib: int = 1536,
                 smp: int = 2, swap_mib: int = 256, watchdog: bool = False, append: str = ""):
        self.image = image
        self.run_dir = Path(run_dir)
        self.name = name
        self.memory_mib = memory_mib
        self.smp = smp
        self.swap_mib = swap_mib
        self.watchdog = watchdog
        self.append = append
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self.memory_total_gib: float | None = None
        self.timings: dict[str, float] = {}
        self._kept: paramiko.SSHClient | None = None

    # paths
    @property
    def root_disk(self) -> Path:
        return self.run_dir / "root.img"

    @property
    def swap_disk(self) -> Path:
        return self.run_dir / "swap.img"

    @property
    def console_log(self) -> Path:
        return self.run_dir / "console.log"

    @property
    def known_hosts(self) -> Path:
        return self.run_dir / "known_hosts"

    @property
    def key(self) -> Path:
        return self.image.key

    @property
    def inventory_dir(self) -> Path:
        return self.run_dir / "inventory"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kernel_hung(self, at_least_s: int = 60) -> str | None:
        """The guest kernel's own word, on this boot's console, that it hung: its first soft lockup of at
        least ``at_least_s`` seconds (shorter ones, 20-27 s, come and go on a slow TCG boot); None if none."""
        text = self.console_log.read_text(errors="replace") if self.console_log.exists() else ""
        for match in SOFT_LOCKUP.finditer(text):
            if int(match["seconds"]) >= at_least_s:
                return match[0].strip()
        return None

    def __enter__(self) -> VM:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # lifecycle
    def _prepare_disks(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.run_dir, 0o700)
        _run(["cp", "--sparse=always", str(self.image.root), str(self.root_disk)])
        self.swap_disk.unlink(missing_ok=True)
        with open(self.swap_disk, "wb") as handle:
            handle.truncate(self.swap_mib * 2**20)
        # A block device, not a file: holes are fine for swap here.
        _run(["mkswap", "-L", SWAP_LABEL, str(self.swap_disk)])

    def qemu_command(self) -> list[str]:
        append = f"{KERNEL_APPEND} {self.append}".strip()
        cmd = [
            QEMU, "-accel", "tcg", "-smp", str(self.smp), "-m", str(self.memory_mib),
            "-name", self.name,
            "-kernel", str(self.image.kernel), "-initrd", str(self.image.initrd), "-append", append,
            # cache=unsafe: the disks are throw-away copies, so the guest's flushes need not reach the host's
            # disk. A guest crash or reboot loses nothing (qemu, and the host's page cache, stay up); only a
            # host crash would, and then the VM is gone anyway. Measured here: boot to SSH 18.3-18.8 s -> 14.5 s,
            # apt-get install earlyoom 26.5-29.0 s -> 24.0-25.9 s (2026-12-07).
            "-drive", f"file={self.root_disk},format=raw,if=virtio,cache=unsafe",
            "-drive", f"file={self.swap_disk},format=raw,if=virtio,cache=unsafe",
            "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.port}-:22",
            "-device", "virtio-net-pci,netdev=n0",
            "-nographic", "-serial", f"file:{self.console_log}", "-monitor", "none",
            "-pidfile", str(self.run_dir / "qemu.pid"),
        ]
        if self.watchdog:
            cmd += ["-device", "i6300esb", "-watchdog-action", "reset"]
        return cmd

    def start(self) -> None:
        if self.alive():
            raise VMError(f"vm: {self.name} is already running")
        if self.watchdog and self.image.meta.get("flavour") != "generic":
            raise VMError("vm: watchdog=True needs ensure_image(kernel='generic'): the cloud kernel has no "
                          "i6300esb driver (use softdog there)")
        self._prepare_disks()
        self.known_hosts.unlink(missing_ok=True)
        for _attempt in range(5):
            self.port = free_port()
            self.console_log.write_bytes(b"")
            log = open(self.run_dir / "qemu.log", "wb")
            self.timings["started_at"] = time.monotonic()
            self.process = subprocess.Popen(
                self.qemu_command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent,
            )
            log.close()
            _LIVE.add(self)
            time.sleep(0.5)
            if self.alive():
                break
            output = (self.run_dir / "qemu.log").read_text(errors="replace")
            _LIVE.discard(self)
            if "hostfwd" in output or "forwarding" in output:
                continue  # the port was taken between free_port() and qemu binding it
            raise VMError(f"vm: qemu exited at start (exit {self.process.returncode}): {output.strip()[-1000:]}")
        else:
            raise VMError("vm: could not find a free loopback port for SSH forwarding")
        pub = self.image.host_key_pub.read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n")

    def _client(self, user: str = "root", timeout: float = 10) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        client.load_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect("127.0.0.1", port=self.port, username=user, key_filename=str(self.key),
                           look_for_keys=False, allow_agent=False, timeout=timeout, banner_timeout=timeout,
                           auth_timeout=timeout)
        except BaseException:
            client.close()  # else its transport thread lingers, blocked on the dead socket
            raise
        return client

    def _patient_client(self, user: str, patience: float) -> paramiko.SSHClient:
        """Connect, retrying for up to ``patience`` seconds while the guest is slow to answer.

        Under TCG a guest under memory pressure (the swap tests fill its RAM on purpose)
        can take longer than one banner timeout to fork sshd's session process; that is
        a slow node, not a failed test. Authentication and host-key errors are not retried.
        """
        deadline = time.monotonic() + patience
        while True:
            try:
                return self._client(user, timeout=min(30.0, max(10.0, patience)))
            except (paramiko.AuthenticationException, paramiko.BadHostKeyException):
                raise
            except (OSError, EOFError, paramiko.SSHException):
                if time.monotonic() >= deadline or not self.alive():
                    raise
                time.sleep(2)

    def ssh(self, command: str, timeout: float = 120, user: str = "root",
            connect_patience: float = 90) -> tuple[int, str, str]:
        """Run a command over a NEW SSH session; return (rc, stdout, stderr).

        Raises TimeoutError when the command has not finished after ``timeout`` seconds,
        which is also what a session open across a guest crash ends in: slirp keeps the
        host side of the connection open after the guest is gone. Connecting is retried
        for ``connect_patience`` seconds (0: one attempt, for polling loops).
        """
        client = self._patient_client(user, connect_patience)
        try:
            return self._exec(client, command, timeout)
        finally:
            client.close()

    def run(self, command: str, timeout: float = 120) -> tuple[int, str, str]:
        """Like ssh() as root, but over one connection kept open between calls: a test's control commands.

        A login on a TCG guest costs about a second of its CPU (sshd's session, PAM, logind), which a test
        polling every second takes from what it measures. Never across a reboot or crash (use ssh()):
        the kept connection is dropped when a command on it fails, and when qemu is stopped or killed.
        """
        if self._kept is None or not self._kept.get_transport() or not self._kept.get_transport().is_active():
            self._kept = self._patient_client("root", 90)
        try:
            return self._exec(self._kept, command, timeout)
        except BaseException:
            self._drop_kept()
            raise

    def _drop_kept(self) -> None:
        if self._kept is not None:
            self._kept.close()
            self._kept = None

    def _exec(self, client: paramiko.SSHClient, command: str, timeout: float) -> tuple[int, str, str]:
        """Run ``command`` on an open connection; TimeoutError after ``timeout`` seconds.

        The connection is closed at the deadline: paramiko waits for the answer to the exec request
        itself with no timeout, and a guest that crashes right after accepting it never answers.
        """
        late = TimeoutError(f"vm: `{command}` did not finish on {self.name} within {timeout:.0f} s")
        with ssh_deadline.closing_at_deadline(client.get_transport(), timeout, late):
            # Its stdin's EOF, sent when it is collected, must not follow the server's close of the channel:
            # OpenSSH would end the kept connection (sparkguard/run/channel_eof.py; CI, 2026-12-07).
            _, stdout, stderr = channel_eof.exec_command(client, command, timeout=timeout)
            channel = stdout.channel
            out, err = bytearray(), bytearray()
            while not (channel.exit_status_ready() and not channel.recv_ready()
                       and not channel.recv_stderr_ready()):
                if channel.recv_ready():
                    out += channel.recv(65536)
                elif channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                else:
                    channel.status_event.wait(0.05)
            out += stdout.read()
            err += stderr.read()
            return channel.recv_exit_status(), out.decode(errors="replace"), err.decode(errors="replace")

    def _banner(self, timeout: float = 3) -> bool:
        """True when something answers with an SSH banner on the forwarded port.

        Checked before paramiko connects while polling: while the guest is down, slirp
        accepts the TCP connection and then says nothing, and paramiko would log a
        traceback for every such attempt.
        """
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as conn:
                conn.settimeout(timeout)
                return conn.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    def check(self, command: str, timeout: float = 120) -> str:
        """Like ssh(), but raise VMError unless it exits 0; return stdout."""
        rc, out, err = self.ssh(command, timeout)
        if rc != 0:
            raise VMError(f"vm: `{command}` exited {rc} on {self.name}: {(err or out).strip()[-800:]}")
        return out

    def _try_boot_id(self) -> str | None:
        if not self._banner():
            return None
        try:
            rc, out, _ = self.ssh("cat /proc/sys/kernel/random/boot_id", timeout=15, connect_patience=0)
        except (OSError, EOFError, paramiko.SSHException):  # TimeoutError is an OSError
            return None
        return out.strip() if rc == 0 and out.strip() else None

    def boot_id(self) -> str:
        return self.check("cat /proc/sys/kernel/random/boot_id").strip()

    def _fail(self, message: str) -> VMError:
        tail = ""
        try:
            tail = self.console_log.read_text(errors="replace")[-2000:]
        except OSError:
            pass
        return VMError(f"vm: {message}\n--- console tail ({self.console_log}) ---\n{tail}")

    def wait_for_ssh(self, timeout: float = 240) -> float:
        """Wait until root can run a command over SSH; return seconds since start()."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise self._fail(f"qemu for {self.name} exited while booting")
            if self._try_boot_id():
                elapsed = time.monotonic() - self.timings["started_at"]
                self.timings.setdefault("boot_to_ssh", round(elapsed, 1))
                if self.memory_total_gib is None:
                    self.memory_total_gib = self._memtotal_gib()
                return elapsed
            time.sleep(1)
        raise self._fail(f"{self.name} did not answer SSH on 127.0.0.1:{self.port} within {timeout:.0f} s")

    def _memtotal_gib(self) -> float:
        for line in self.check("cat /proc/meminfo").splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 3)
        raise VMError(f"vm: no MemTotal in {self.name}'s /proc/meminfo")

    def wait_for_reboot(self, old_boot_id: str, timeout: float = 300) -> float:
        """Wait until SSH answers with a boot_id other than old_boot_id; return seconds waited."""
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise self._fail(f"qemu for {self.name} exited during a guest reboot")
            current = self._try_boot_id()
            if current and current != old_boot_id:
                return time.monotonic() - started
            time.sleep(1)
        raise self._fail(f"{self.name} did not come back with a new boot_id within {timeout:.0f} s")

    def _detach(self, command: str) -> str:
        """Run a command in the guest, detached from the SSH session; return the boot_id before it."""
        old = self.check("cat /proc/sys/kernel/random/boot_id", timeout=30).strip()
        self.check(f"setsid -f sh -c 'sleep 1; {command}' </dev/null >/dev/null 2>&1", timeout=30)
        return old

    def reboot(self, timeout: float = 300) -> float:
        """`systemctl reboot` and wait for SSH with a new boot_id; return seconds taken."""
        started = time.monotonic()
        old = self._detach("systemctl reboot")
        self.wait_for_reboot(old, timeout)
        elapsed = round(time.monotonic() - started, 1)
        self.timings["reboot"] = elapsed
        return elapsed

    def crash(self, timeout: float = 300) -> float:
        """Panic the guest kernel (sysrq c, kernel.panic=5) and wait for it to come back; return seconds."""
        started = time.monotonic()
        old = self._detach("sysctl -q kernel.panic=5; echo c > /proc/sysrq-trigger")
        self.wait_for_reboot(old, timeout)
        elapsed = round(time.monotonic() - started, 1)
        self.timings["crash_recovery"] = elapsed
        return elapsed

    def kill(self) -> None:
        """Kill qemu now (no guest shutdown)."""
        self._drop_kept()
        _LIVE.discard(self)
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout: float = 60) -> None:
        """Power the guest off (qemu then exits by itself), then kill qemu if it is still there."""
        try:
            if self.alive():
                try:
                    self._detach("systemctl poweroff")
                except (OSError, EOFError, paramiko.SSHException, VMError):
                    pass
                try:
                    self.process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGTERM)
                    try:
                        self.process.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
        finally:
            self.kill()

    def responsive(self, patience: float = 60) -> bool:
        """True when root can run a command within ``patience`` seconds."""
        if not self.alive():
            return False
        try:
            rc, _, _ = self.ssh("true", timeout=patience, connect_patience=patience)
        except (OSError, EOFError, paramiko.SSHException):
            return False
        return rc == 0

    def restart_fresh(self, timeout: float = 300) -> None:
        """Kill qemu and boot a fresh copy of the image (a reimage), rewriting the inventory.

        For a test session whose shared VM a failed test left wedged (thrashing, hung):
        the next tests get a clean node instead of inheriting the failure.
        """
        had_inventory = (self.inventory_dir / "hosts.yml").exists()
        self.kill()
        self.timings.pop("boot_to_ssh", None)
        self.start()
        self.wait_for_ssh(timeout)
        if had_inventory:
            self.write_inventory()

    def remove_disks(self) -> None:
        """Delete this VM's disk copies (the cached image stays)."""
        if self.alive():
            raise VMError(f"vm: {self.name} is still running")
        for disk in (self.root_disk, self.swap_disk):
            disk.unlink(missing_ok=True)

    # inventory
    def write_inventory(self, directory: Path | None = None) -> Path:
        """Write a sparkguard inventory (hosts.yml + inventory.py) for this VM; return its directory."""
        if self.memory_total_gib is None:
            self.memory_total_gib = self._memtotal_gib()
        directory = Path(directory) if directory else self.inventory_dir
        directory.mkdir(parents=True, exist_ok=True)
        document = {
            "all": {
                "vars": {
                    "ssh_user": "root",
                    "ssh_key": str(self.key),
                    "ssh_known_hosts_file": str(self.known_hosts),
                    "ssh_host_key_checking": "yes",
                    # The VM's own kernel: its MemTotal, not the host's.
                    "node": {"memory_total_gib": self.memory_total_gib, "device_profile": "cpu-only"},
                },
                "children": {"vm": {"hosts": {self.name: {"ssh_host": "127.0.0.1", "ssh_port": self.port}}}},
            }
        }
        header = f"# Written by tests/vm/harness.py for {self.name} (qemu, 127.0.0.1:{self.port}); rewritten on each boot.\n"
        (directory / "hosts.yml").write_text(header + yaml.safe_dump(document, sort_keys=False))
        write_adapter(directory, str(directory))
        return directory


def qemu_processes() -> list[str]:
    """Running qemu-system processes on this machine (pid and command line)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and Path(cmdline[0].decode(errors="replace")).name.startswith("qemu-system"):
            found.append(f"{proc.name} {b' '.join(cmdline).decode(errors='replace').strip()}")
    return found
