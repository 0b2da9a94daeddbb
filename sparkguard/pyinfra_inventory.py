"""Adapter so plain ``pyinfra`` reads a sparkguard YAML inventory.

pyinfra's group_data/ only loads *.py files, and its inventory files are
Python modules whose list/tuple attributes are groups. Each inventory directory
therefore carries a two-line ``inventory.py`` calling ``groups_for(__file__)``.
Validation happens here, before pyinfra connects to anything.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .inventory.loader import load_inventory

ADAPTER_SOURCE = '''"""pyinfra adapter for the sparkguard inventory in this directory (hosts.yml).

    pyinfra {rel}/inventory.py deploy/site.py
"""

from sparkguard.pyinfra_inventory import groups_for as _groups_for

globals().update(_groups_for(__file__))
'''


def groups_for(adapter_file: str) -> dict[str, Any]:
    """Return pyinfra groups: ``all`` carries every host with its validated data."""
    from . import builtin_roles  # plain pyinfra's entry point into sparkguard: it chooses the roles

    builtin_roles.register()
    try:
        inventory = load_inventory(Path(adapter_file).parent)
    except ConfigError as error:
        for paragraph in error.paragraphs():
            print(f"sparkguard: {paragraph}\n", file=sys.stderr)
        print("sparkguard: inventory invalid; nothing was applied to any node.", file=sys.stderr)
        raise SystemExit(error.exit_code) from None
    groups: dict[str, Any] = {"all": ([(h.name, h.pyinfra_data()) for h in inventory.hosts], {})}
    for group, members in inventory.groups.items():
        if group != "all":
            groups[group] = list(members)
    return groups


def write_adapter(directory: Path, display: str) -> Path:
    path = directory / "inventory.py"
    path.write_text(ADAPTER_SOURCE.format(rel=display))
    return path
