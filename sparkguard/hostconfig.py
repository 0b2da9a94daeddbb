"""The full settings of one host: connection, declared node facts, every role.

Built from the role registry, so adding a role adds its block here, to
validation, and to the generated docs, with no second list to keep in sync.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import create_model

from . import registry
from .settings import HostName, Settings, Word, required, setting

if TYPE_CHECKING:
    from .role import Role

S = TypeVar("S", bound=Settings)

DeviceProfile = Literal["auto", "dgx-spark", "gh200", "jetson", "amd-apu", "discrete", "cpu-only"]


class NodeSettings(Settings):
    """Facts about the node declared in the inventory, so render works offline."""

    memory_total_gib: float | None = setting(
        None,
        "MemTotal as the node reports it (`free -b` / 2^30). Needed for render; apply checks it against"
        " the node and fails if they differ by more than 2%. DGX Spark: about 121.7.",
        unit="GiB",
        gt=0,
        le=65536,
    )
    device_profile: DeviceProfile = setting(
        "auto",
        "Device class. auto = detected on apply (nvidia-smi name, device tree, cpuinfo, rocminfo); a declared"
        " value that disagrees with the node is an error.",
    )


class ConnectionSettings(Settings):
    """How the operator's machine reaches the node (never written to the node)."""

    ssh_host: HostName = required("Address of the node's management interface (IP or DNS name).", min_length=1)
    ssh_port: int = setting(22, "SSH port.", ge=1, le=65535)
    ssh_user: Word = setting("root", "SSH user; a non-root user needs passwordless sudo and `sudo: true`.", min_length=1)
    ssh_key: str | None = setting(None, "Private key file (relative paths are relative to the inventory).",
                                  operator_file="ssh-key")
    ssh_known_hosts_file: str | None = setting(
        None, "known_hosts file to check host keys against (relative to the inventory); default ~/.ssh/known_hosts.",
        operator_file="known-hosts")
    ssh_host_key_checking: Literal["yes", "accept-new"] = setting(
        "accept-new",
        "yes = the key must already be known; accept-new = trust on first use. A CHANGED key is always refused.",
    )
    sudo: bool = setting(False, "Run every operation through sudo (for a non-root ssh_user).")

    @classmethod
    def connection_fields(cls) -> tuple[str, ...]:
        return tuple(ConnectionSettings.model_fields)


def host_config_model() -> type[HostConfig]:
    """HostConfig = connection settings + ``node`` + one block per registered role."""
    return _model_for(registry.roles())


@lru_cache(maxsize=4)
def _model_for(roles: tuple[Role, ...]) -> type[HostConfig]:
    role_fields = {role.name: (role.settings, role.settings()) for role in roles}
    # pydantic's create_model overloads take no **fields built at run time (so the result is Any to mypy).
    return create_model(  # type: ignore[call-overload, no-any-return]
        "HostConfig",
        __base__=ConnectionSettings,
        __doc__="All settings of one host.",
        node=(NodeSettings, NodeSettings()),
        **role_fields,
    )


if TYPE_CHECKING:
    class HostConfig(ConnectionSettings):
        """What a type checker sees: the connection settings, ``node``, and one block per role.

        The role blocks exist only once the registry has built the model, so they are ``Any`` here; a
        role names its own settings class where it reads its block (the core imports no role).
        """

        node: NodeSettings

        def __getattr__(self, role: str) -> Any: ...
else:
    # For type annotations only: the real class is built from the registry.
    HostConfig = ConnectionSettings


def settings_of(config: HostConfig, kind: type[S]) -> S:
    """Another role's settings block, typed: the block whose class is ``kind`` (its defaults where that role
    is off). A role reads another only this way, and only a role it declares (``Role.reads``, ``requires``
    or ``uses``; tests/unit/test_architecture.py holds every role to it), so each edge between roles is
    named in one place and checked by mypy.
    """
    for role in registry.roles():
        if role.settings is kind:
            block = getattr(config, role.name)
            if not isinstance(block, kind):
                raise TypeError(f"{role.name}'s block is a {type(block).__name__}, not a {kind.__name__}")
            return block
    raise LookupError(f"no registered role has the settings class {kind.__name__}")
