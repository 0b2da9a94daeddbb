"""The desired-state model every role produces.

A role is a pure function from validated host settings to a ``DesiredState``.
Apply (pyinfra), render (files for review) and audit all read this one model,
so what reviewers diff is byte-for-byte what lands on the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FileBody:
    """What lands on the node for one file: the path, the exact content, its mode and owner, and the check.

    ``validate`` is a shell command run on the node against the staged copy
    (``{path}`` is replaced by its location) before it replaces the live file,
    like Ansible's ``validate:``; a non-zero exit leaves the live file untouched.
    Shared by the desired state (``ManagedFile``) and the write operation
    (``sparkguard.engine.operations.FileSpec``), which each add only their own fields.
    """

    path: str
    content: str
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"
    validate: str | None = None


@dataclass(frozen=True)
class ManagedFile(FileBody):
    """A file with exact content, as a role declares it (``FileBody``, plus what render and apply's order need).

    ``secret`` files are never printed; render shows their ``review`` (the same file with each
    secret replaced by ``<secret>``, still valid for the tool that checks it), or a placeholder
    where the role gives none.
    """

    secret: bool = False
    # Install before the role's packages: a package whose postinst starts a daemon
    # (node_exporter on *:9100) must find its listen address already in place.
    before_packages: bool = False
    # What render shows of a secret file (never applied): see the docstring.
    review: str | None = field(default=None, compare=False, repr=False)

    @property
    def is_systemd_unit(self) -> bool:
        return is_systemd_unit_path(self.path)


@dataclass(frozen=True)
class Directory:
    """A directory; ``None`` for mode/owner/group leaves that to whoever else owns it (a package)."""

    path: str
    mode: str | None = "0755"
    owner: str | None = "root"
    group: str | None = "root"


@dataclass(frozen=True)
class Service:
    """A systemd unit that should be enabled/running.

    It is restarted when any file in ``restart_on`` changed in this apply, and
    reloaded when a file in ``reload_on`` changed, and never otherwise.
    """

    name: str
    enabled: bool | None = True
    running: bool | None = True
    restart_on: tuple[str, ...] = ()
    reload_on: tuple[str, ...] = ()
    # True: masked (cannot start, also not pulled in at boot); False: not masked; None: leave alone.
    masked: bool | None = None


@dataclass(frozen=True)
class FileEdit:
    """An edit of a node-owned file (fstab): every match of ``regexp`` is replaced by ``replace``.

    Data, not a Python callable, so that apply and the Ansible export (``ansible.builtin.replace``,
    which takes exactly these two values) compute the same file: ``transform`` is what that module
    does with them (``replace_all``). The result depends on the node's file, so render lists the
    edit, not its output. An absent file is left absent.
    """

    path: str
    regexp: str
    replace: str
    description: str
    validate: str | None = None
    # A systemd generator reads this file (fstab: systemd-fstab-generator makes its .mount and .swap units),
    # so systemd must re-read its units after the edit, or it goes on acting on the old lines.
    generator_input: bool = False

    def transform(self, text: str) -> str:
        return replace_all(self.regexp, self.replace, text)


def replace_all(regexp: str, replace: str, text: str) -> str:
    """Every match of ``regexp`` in ``text`` replaced, as ``ansible.builtin.replace`` does it: Python ``re``
    with MULTILINE (``^``/``$`` at each line), ``replace`` may name groups (``\\1``, ``\\g<name>``).

    >>> replace_all(r"^(?=b)", "# ", "a\\nb\\n")
    'a\\n# b\\n'
    """
    return re.compile(regexp, re.MULTILINE).sub(replace, text)


@dataclass(frozen=True)
class Ensure:
    """A runtime state reached by a command, checked first so a converged node runs nothing.

    ``check`` exits 0 when the state already holds; otherwise ``fix`` runs.
    """

    description: str
    check: str
    fix: str


@dataclass(frozen=True)
class AbsentFiles:
    """Files a role may once have installed that must go when its desired state no longer has them.

    Every node file matching one of ``globs`` (``*`` in the last component only) that is not one of
    the state's own files is removed: a model deleted from the inventory, a policy switched off. Only
    the role's own paths belong in ``globs``.
    """

    description: str
    globs: tuple[str, ...]


@dataclass(frozen=True)
class AbsentInstances:
    """Instances of a unit template that must not run: each instance not in ``keep`` is stopped and disabled,
    with its ``companions`` (other templates, same instance name) and its per-instance ``files``
    (``{}`` is the instance name)."""

    description: str
    template: str          # "sparkguard-vllm@{}.service"
    keep: tuple[str, ...]
    companions: tuple[str, ...] = ()
    files: tuple[str, ...] = ()


# Where systemd reads units and drop-ins: a change below one of these needs a daemon-reload.
SYSTEMD_UNIT_DIRS = ("/etc/systemd/", "/usr/lib/systemd/", "/lib/systemd/", "/usr/local/lib/systemd/")


def is_systemd_unit_path(path: str) -> bool:
    return path.startswith(SYSTEMD_UNIT_DIRS)


@dataclass(frozen=True)
class DesiredState:
    role: str
    packages: tuple[str, ...] = ()
    directories: tuple[Directory, ...] = ()
    files: tuple[ManagedFile, ...] = ()
    services: tuple[Service, ...] = ()
    sysctls: dict[str, str] = field(default_factory=dict)
    edits: tuple[FileEdit, ...] = ()
    ensures: tuple[Ensure, ...] = ()
    absent_files: tuple[AbsentFiles, ...] = ()
    absent_instances: tuple[AbsentInstances, ...] = ()

    def file(self, path: str) -> ManagedFile:
        for managed in self.files:
            if managed.path == path:
                return managed
        raise KeyError(path)


def normal_mode(mode: str) -> str:
    """A file mode as stat prints it ('0644' and '644' are both '644'; '0' stays '0'): how a managed file's
    declared mode is compared with what a node reports.

    >>> normal_mode("0644"), normal_mode("755"), normal_mode("0")
    ('644', '755', '0')
    """
    return str(int(str(mode), 8) and oct(int(str(mode), 8))[2:])
