"""Sandbox nodes of another architecture: the kernel runs their programs through qemu user emulation.

Every target but Strix Halo runs aarch64 user space (DGX Spark / GB10, GH200, Jetson Thor), while a
developer's machine is usually x86_64. With Debian's qemu-user-static registered as the kernel's
binfmt_misc handler for aarch64 ELF files, debootstrap builds an arm64 rootfs and systemd-nspawn boots it:
systemd, sshd, apt, earlyoom and every sparkguard program on the node run as arm64 code under emulation,
slower but real. The handler must carry the F flag (the kernel opens the interpreter when it is registered),
so it works inside a container's root, where no qemu binary exists.

The kernel of the node is still this machine's (its page size, cgroups, sysctls): what that cannot show
(64 KiB pages on GH200, the NVIDIA driver) is listed in docs/arm64.md.
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import SparkguardError

# Debian's architecture name -> the kernel's (uname -m), for the architectures sparkguard's targets run.
ARCHES = {"amd64": "x86_64", "arm64": "aarch64"}
BINFMT = Path("/proc/sys/fs/binfmt_misc")
# Debian's qemu-user-static ships one systemd binfmt.d line per architecture, in the kernel's register format.
HANDLERS = Path("/usr/lib/binfmt.d")


class EmulationError(SparkguardError):
    exit_code = 1


def host_arch() -> str:
    """This machine's architecture in Debian's words (amd64, arm64)."""
    machine = platform.machine()
    for arch, kernel_name in ARCHES.items():
        if kernel_name == machine:
            return arch
    raise EmulationError(f"sandbox: this machine's architecture '{machine}' is not one sparkguard targets; "
                         f"allowed: {', '.join(ARCHES.values())}")


def handler_line(conf: str) -> str:
    """The register line of a binfmt.d file: its one line that starts with ':' (comments and blanks skipped).

    >>> handler_line("# qemu\\n:qemu-aarch64:M::\\\\x7fELF::/usr/bin/qemu-aarch64-static:F\\n")
    ':qemu-aarch64:M::\\\\x7fELF::/usr/bin/qemu-aarch64-static:F'
    """
    lines = [line.strip() for line in conf.splitlines() if line.strip().startswith(":")]
    if len(lines) != 1:
        raise EmulationError(f"sandbox: expected one binfmt_misc register line, found {len(lines)}")
    return lines[0]


def line_flags(line: str) -> str:
    """The flags of a register line ``:name:type:offset:magic:mask:interpreter:flags``.

    >>> line_flags(":qemu-aarch64:M::\\\\x7fELF:\\\\xff:/usr/libexec/qemu-binfmt/aarch64-binfmt-P:POCF")
    'POCF'
    """
    return line.rsplit(":", 1)[1]


def registered(name: str, binfmt: Path = BINFMT) -> tuple[bool, str] | None:
    """(enabled, flags) of the kernel's handler ``name``, or None when there is none."""
    entry = binfmt / name
    if not entry.exists():
        return None
    text = entry.read_text()
    flags = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("flags:")), "")
    return text.startswith("enabled"), flags


def ensure_emulation(arch: str, log: Callable[..., Any] = print, binfmt: Path = BINFMT,
                     handlers: Path = HANDLERS) -> str:
    """Make this kernel run ``arch`` programs, registering Debian's handler when none is there; return what
    was done ("native", "registered" or "already registered"). Says plainly when the kernel cannot."""
    if arch not in ARCHES:
        raise EmulationError(f"sandbox: --arch {arch} is not supported; choose one of {', '.join(ARCHES)}")
    if arch == host_arch():
        return "native"
    name = f"qemu-{ARCHES[arch]}"
    if not (binfmt / "register").exists():
        mounted = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)], capture_output=True,
                                 text=True)
        if mounted.returncode != 0 or not (binfmt / "register").exists():
            raise EmulationError(f"sandbox: this kernel cannot run {arch} programs: binfmt_misc is not mounted at "
                                 f"{binfmt} and mounting it failed ({mounted.stderr.strip() or 'no register file'}); "
                                 "a container needs it from its host")
    state = registered(name, binfmt)
    if state is None:
        conf = handlers / f"{name}.conf"
        if not conf.exists():
            raise EmulationError(f"sandbox: no handler for {arch} programs: {conf} is missing; install "
                                 "qemu-user-static (./dev.sh install does)")
        line = handler_line(conf.read_text())
        if "F" not in line_flags(line):
            raise EmulationError(f"sandbox: {conf} registers without the F flag: its interpreter would not be "
                                 "found inside a node's root")
        try:
            (binfmt / "register").write_text(line + "\n")
        except OSError as refused:
            raise EmulationError(f"sandbox: this kernel refused to register {name} ({refused.strerror}); a "
                                 "container needs its host to register it") from None
        log(f"sandbox: registered {name} ({conf}) as this kernel's handler for {arch} programs")
        state = registered(name, binfmt)
        if state is None:
            raise EmulationError(f"sandbox: registering {name} left no handler in {binfmt}")
        done = "registered"
    else:
        done = "already registered"
    enabled, flags = state
    if not enabled or "F" not in flags:
        raise EmulationError(f"sandbox: the kernel's {name} handler is {'enabled' if enabled else 'disabled'} with "
                             f"flags '{flags}'; it must be enabled with F (echo -1 > {binfmt / name} removes it, "
                             "and the next `sandbox up --arch` registers Debian's)")
    return done
