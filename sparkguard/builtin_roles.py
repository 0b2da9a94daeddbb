"""The roles sparkguard ships, handed to the core.

Only entry points call this (the CLI, the pyinfra inventory adapter, deploy/*.py): the core itself
knows no role. The roles are the package ``sparkguard.roles`` in a checkout (``sparkguard/roles`` links to
the top-level ``roles/``) and in an installed wheel alike (pyproject.toml maps ``roles/`` there), so another
project's package named ``roles`` can never be picked up.
"""

from __future__ import annotations

import importlib
from types import ModuleType

PACKAGE = "sparkguard.roles"


def package() -> ModuleType:
    """The roles package (imported once)."""
    return importlib.import_module(PACKAGE)


def register() -> None:
    """Hand the shipped roles to the core (sparkguard.registry): what every entry point does first."""
    package().register()


def role(name: str) -> ModuleType:
    """One shipped role's package, e.g. ``role("earlyoom").ROLE``."""
    return importlib.import_module(f"{PACKAGE}.{name}")
