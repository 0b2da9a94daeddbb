"""The desired-state model every role produces.

A role is a pure function from validated host settings to a ``DesiredState``.
Apply (pyinfra), render (files for review) and audit all read this one model,
so what reviewers diff is byte-for-byte what lands on the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ManagedFile:
    """A file with exact content.

    ``validate`` is a shell command run on the node against the staged copy
    (``{path}`` is replaced by its location) before it replaces the live file,
    like Ansible's ``validate:``. ``secret`` files are shown as a placeholder
    by render and never printed.
    """

    path: str
    content: str
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"
    validate: str | None = None
    secret: bool = False
    # Install before the role's packages: a package whose postinst starts a daemon
    # (node_exporter on *:9100) must find its listen address already in place.
    before_packages: bool = False

    @property
    def is_systemd_unit(self) -> bool:
        return self.path.startswith(("/etc/systemd/", "/usr/lib/systemd/", "/lib/systemd/"))


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
    enabled: bool = True
    running: bool = True
    restart_on: tuple[str, ...] = ()
    reload_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class DesiredState:
    role: str
    packages: tuple[str, ...] = ()
    directories: tuple[Directory, ...] = ()
    files: tuple[ManagedFile, ...] = ()
    services: tuple[Service, ...] = ()
    sysctls: dict[str, str] = field(default_factory=dict)

    def file(self, path: str) -> ManagedFile:
        for managed in self.files:
            if managed.path == path:
                return managed
        raise KeyError(path)
