"""The one reader for files ON THE OPERATOR'S MACHINE that an inventory names (certificates, keys, secrets, ...).

An inventory is reviewed in pull requests and rendered by CI: whatever file it names, the renderer reads
with the renderer's rights, and a certificate lands in a 0644 file on the node and in the render. So every
such read goes through here, with three rules:

- **regular files only**: nothing under /proc, /sys or /dev, whether the path names it or one of its symlinks
  leads there (checked on the path, on where it resolves and on the file actually opened); no FIFO, device,
  socket or directory (checked before opening, and again on the open file);
- **a size cap** per kind;
- **a content check** per kind: a certificate is CERTIFICATE PEM blocks and nothing else (a private key is
  refused), a private key file holds one private key and nothing else, a secret is short UTF-8 text.

A setting declares its kind (``setting(..., operator_file="certificate")``). ``problems`` checks every such
setting of a host while the inventory loads, so validate, render, the Ansible export (which reads nothing,
and writes a lookup instead) and apply refuse alike, with exit 2. A refusal names the host, the field and
the path: never a byte of the file.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..errors import ConfigError, Problem

# Pseudo-file systems: their "files" are the reader's own environment, memory, devices and kernel state.
FORBIDDEN_TREES = ("/proc", "/sys", "/dev")
SETTING_KEY = "operator_file"  # json_schema_extra key a setting declares its kind under


class Refused(Exception):
    """Why a file is not read. The reason never quotes the file's content."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Kind:
    """What a file named by a setting may be: its cap, and what its content must look like."""

    name: str
    allowed: str  # what is accepted, in words (ends every refusal)
    max_bytes: int
    check: Callable[[bytes], str | None]  # why the content is refused (never quoting it), or None


# --------------------------------------------------------------------------------------- content checks

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]{1,64})-----[ \t]*\r?\n([A-Za-z0-9+/=\s]*?)-----END \1-----")
_ANY_PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")


def _text_problem(data: bytes) -> str | None:
    if b"\x00" in data:
        return "holds NUL bytes: not a text file"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    return None


def pem_blocks(data: bytes) -> list[tuple[str, bytes]] | None:
    """(label, DER bytes) of each PEM block, or None when the file holds anything else besides whitespace."""
    blocks: list[tuple[str, bytes]] = []
    position = 0
    for match in _PEM_BLOCK.finditer(data):
        if data[position:match.start()].strip():
            return None
        try:
            der = base64.b64decode(b"".join(match.group(2).split()), validate=True)
        except (binascii.Error, ValueError):
            return None
        blocks.append((match.group(1).decode("ascii"), der))
        position = match.end()
    if data[position:].strip():
        return None
    return blocks


def _certificate_problem(data: bytes) -> str | None:
    if b"PRIVATE KEY" in data:
        return ("holds a private key: a certificate file goes to the node as a world-readable (0644) file and into"
                " renders; keep the key in its own file (monitoring.web.tls_key_file)")
    reason = _text_problem(data)
    if reason:
        return reason
    blocks = pem_blocks(data)
    if blocks is None:
        return "holds something besides PEM blocks (explanatory text, a broken block, another format)"
    if not blocks:
        return "holds no certificate"
    if any(label != "CERTIFICATE" for label, _ in blocks):
        return "holds a PEM block that is not a CERTIFICATE"
    from cryptography import x509

    for _, der in blocks:
        try:
            x509.load_der_x509_certificate(der)
        except ValueError:
            return "holds a CERTIFICATE block that is not an X.509 certificate"
    return None


def _private_key_problem(data: bytes) -> str | None:
    reason = _text_problem(data)
    if reason:
        return reason
    if b"ENCRYPTED" in data:
        return "is an encrypted key: the daemons cannot ask for a passphrase (write it unencrypted, mode 0600)"
    blocks = pem_blocks(data)
    if blocks is None:
        return "holds something besides PEM blocks (explanatory text, a broken block, another format)"
    keys = [label for label, _ in blocks if label.endswith("PRIVATE KEY")]
    others = [label for label, _ in blocks if not label.endswith("PRIVATE KEY") and label != "EC PARAMETERS"]
    if others:
        return "holds PEM blocks besides the private key (a certificate belongs in its own file)"
    if len(keys) != 1:
        return "holds no private key" if not keys else "holds more than one private key"
    return None


def _ssh_key_problem(data: bytes) -> str | None:
    return _text_problem(data) or (None if _ANY_PRIVATE_KEY.search(data) else "holds no PEM/OpenSSH private key")


KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    Kind("secret", "a regular file of UTF-8 text (a password or token), at most 4 KiB", 4096, _text_problem),
    Kind("certificate", "a regular file of PEM certificates: only -----BEGIN CERTIFICATE----- blocks, no private key"
         " and no other text, at most 256 KiB", 256 * 1024, _certificate_problem),
    Kind("private-key", "a regular file holding one unencrypted PEM private key (-----BEGIN ... PRIVATE KEY-----) and"
         " nothing else, at most 64 KiB", 64 * 1024, _private_key_problem),
    Kind("ssh-key", "a regular file holding an SSH private key (PEM or OpenSSH format), at most 64 KiB", 64 * 1024,
         _ssh_key_problem),
    Kind("known-hosts", "a regular file of UTF-8 text in known_hosts format, at most 4 MiB", 4 << 20, _text_problem),
    Kind("json", "a regular file of UTF-8 JSON, at most 1 MiB", 1 << 20, _text_problem),
)}


# --------------------------------------------------------------------------------------- the reader

def _under_forbidden(path: str) -> bool:
    return any(path == tree or path.startswith(tree + "/") for tree in FORBIDDEN_TREES)


def _size(max_bytes: int) -> str:
    return f"{max_bytes // (1 << 20)} MiB" if max_bytes >= 1 << 20 else f"{max_bytes // 1024} KiB"


def read_bytes(path: str | Path, max_bytes: int) -> bytes | None:
    """The file's bytes; None when nothing is there or it may not be read (apply's preflight says so).

    Raises ``Refused`` for a path under /proc, /sys or /dev (as written or once its symlinks are
    followed), a file that is not a regular file, a symlink loop, a relative path, or one over ``max_bytes``.
    """
    text = os.path.expanduser(str(path))
    if not os.path.isabs(text):
        raise Refused("is not an absolute path (nor a ~ path of a known user)")
    written = os.path.normpath(text)
    real = os.path.realpath(written)
    for candidate in (written, real):
        if _under_forbidden(candidate):
            where = "is" if candidate == written else f"leads (through a symlink) to {candidate}, which is"
            raise Refused(f"{where} under /proc, /sys or /dev: never a file to read (the reader's own environment,"
                          f" memory or a device)")
    try:
        before = os.stat(real)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM):
            return None
        if error.errno == errno.ELOOP:
            raise Refused("is a symlink loop") from None
        raise Refused(f"cannot be examined ({error.strerror})") from None
    if not stat.S_ISREG(before.st_mode):
        what = "a directory" if stat.S_ISDIR(before.st_mode) else "a FIFO" if stat.S_ISFIFO(before.st_mode) \
            else "a device" if stat.S_ISCHR(before.st_mode) or stat.S_ISBLK(before.st_mode) \
            else "a socket" if stat.S_ISSOCK(before.st_mode) else "not a regular file"
        raise Refused(f"is {what}, not a regular file")
    if before.st_size > max_bytes:
        raise Refused(f"is larger than {_size(max_bytes)}")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(real, flags)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.EACCES, errno.EPERM):
            return None
        raise Refused("changed while it was read (a symlink or a non-regular file now)") from None
    with os.fdopen(descriptor, "rb") as handle:
        opened = os.fstat(descriptor)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise Refused("changed while it was read (a symlink or a non-regular file now)")
        try:  # what the kernel says was opened, whatever a directory on the way did meanwhile
            actual = os.readlink(f"/proc/self/fd/{descriptor}")
        except OSError:
            actual = real
        if _under_forbidden(actual):
            raise Refused("leads to a file under /proc, /sys or /dev: never a file to read")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(f"is larger than {_size(max_bytes)}")
    if data and opened.st_size == 0:  # procfs and sysfs files report size 0, wherever they are mounted
        raise Refused("reports a size of 0 yet holds data: a pseudo-file (procfs, sysfs), never a file to read")
    return data


def read_checked(path: str | Path, kind: str) -> bytes | None:
    """The file's bytes once the kind's rules hold; None when absent or unreadable. Raises ``Refused``."""
    rules = KINDS[kind]
    data = read_bytes(path, rules.max_bytes)
    if data is None:
        return None
    reason = rules.check(data)
    if reason:
        raise Refused(reason)
    return data


def read_text(path: str | Path, kind: str, field: str = "a file on the operator's machine") -> str | None:
    """The file as stripped text (None when absent, unreadable or empty); a refusal is a ConfigError (exit 2)."""
    try:
        data = read_checked(path, kind)
    except Refused as refused:
        raise ConfigError([refusal("", field, str(path), kind, refused.reason)]) from None
    if data is None:
        return None
    return data.decode("utf-8", errors="replace").strip() or None


def refusal(host: str, field: str, path: str, kind: str, reason: str, source: str = "") -> Problem:
    """One paragraph: host, field, the path (never the content), why, and what is allowed."""
    return Problem(host, field, path, f"refused: this file {reason}. Allowed: {KINDS[kind].allowed}, on the"
                                      f" operator's machine", source)


def check(path: str | Path, kind: str) -> str | None:
    """Why the file at ``path`` may not be used as ``kind`` (None when it may, or when nothing is there)."""
    try:
        read_checked(path, kind)
    except Refused as refused:
        return refused.reason
    return None


# --------------------------------------------------------------------------------------- the settings

def kind_of(info: Any) -> str | None:
    """The operator-file kind a setting declares (``setting(..., operator_file=KIND)``), or None."""
    extra = getattr(info, "json_schema_extra", None)
    kind = extra.get(SETTING_KEY) if isinstance(extra, dict) else None
    return kind if isinstance(kind, str) else None


def declared(model: BaseModel, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """(dotted field, kind, path) of every operator-file setting that is set, in blocks and maps of blocks too."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        dotted = f"{prefix}{name}"
        kind = kind_of(info)
        if kind and isinstance(value, str) and value:
            yield dotted, kind, value
        elif isinstance(value, BaseModel):
            yield from declared(value, dotted + ".")
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, BaseModel):
                    yield from declared(item, f"{dotted}.{key}.")


def problems(host: str, config: BaseModel) -> list[Problem]:
    """Every operator-side file the host's settings name, checked now (validate), as render and apply would read it.

    A file that is not there is no problem here (a review machine has no keys; apply's preflight refuses it);
    a relative path is the owning block's own check.
    """
    found = []
    for field, kind, path in declared(config):
        if not path.startswith(("/", "~")):
            continue
        reason = check(path, kind)
        if reason:
            found.append(refusal(host, field, path, kind, reason))
    return found
