"""The one way a secret setting is given: an environment variable or a file ON THE OPERATOR'S MACHINE.

The inventory (a YAML file reviewed in pull requests) never holds a secret's value, only where
to read it. The value goes into exactly one file on the node (mode 0600/0640, rendered as a
placeholder); node.json, renders, --json and errors show ``<secret>`` (settings.masked_dump).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from . import operator_files

# What an env file (systemd EnvironmentFile, docker --env-file) carries without quoting.
ENV_SAFE = re.compile(r"[A-Za-z0-9_.:+/=@-]+")
# (env name, file path) -> what read_secret returns instead of reading; set only inside ``stand_ins``.
StandIn = Callable[[str | None, str | None], str]
_stand_in: ContextVar[StandIn | None] = ContextVar("sparkguard_secret_stand_in", default=None)


@contextmanager
def stand_ins(make: StandIn) -> Iterator[None]:
    """While active, ``read_secret`` reads nothing and returns ``make(env_name, file_path)`` for a set source.

    The Ansible export builds the desired states this way: it finds the stand-ins in the files and writes a
    lookup of the same environment variable or file in their place, so no secret value is ever read
    into (and so never written to) the export.
    """
    token = _stand_in.set(make)
    try:
        yield
    finally:
        _stand_in.reset(token)


def read_secret(env_name: str | None, file_path: str | None, kind: str = "secret",
                field: str = "a file on the operator's machine") -> str | None:
    """The secret, or None when no source is set or it is empty/unreadable. A file is read through
    sparkguard.inventory.operator_files (a regular file of ``kind`` under its cap: never /proc, /dev/zero, a FIFO or a
    directory); one it refuses is a ConfigError (exit 2) naming ``field`` and the path, never the content."""
    make = _stand_in.get()
    if make is not None and (env_name or file_path):
        return make(env_name, file_path)
    if env_name:
        return os.environ.get(env_name) or None
    if file_path:
        return operator_files.read_text(file_path, kind, field)
    return None


def source_words(env_name: str | None, file_path: str | None) -> str:
    return f"environment variable {env_name}" if env_name else f"file {Path(file_path or '').expanduser()}"
