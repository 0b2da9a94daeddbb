"""The roles sparkguard ships, found where this installation keeps them, and handed to the core.

Only entry points call this (the CLI, the pyinfra inventory adapter, deploy/*.py): the core itself
knows no role. In a checkout the roles are the top-level ``roles`` package beside ``sparkguard/``; in an
installed wheel they are ``sparkguard.roles``. Which one is decided by the files on disk, never by what
happens to be importable, so another project's package named ``roles`` can never be picked up.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from .paths import INSTALLED, ROLES_DIR

CHECKOUT_NAME = "roles"
INSTALLED_NAME = "sparkguard.roles"


def package() -> ModuleType:
    """The roles package (imported once)."""
    if INSTALLED:
        return importlib.import_module(INSTALLED_NAME)
    loaded = sys.modules.get(CHECKOUT_NAME)
    if loaded is not None and Path(getattr(loaded, "__file__", None) or "/").resolve() == ROLES_DIR / "__init__.py":
        return loaded  # the checkout's roles, already imported (the tests import them by name)
    spec = importlib.util.spec_from_file_location(CHECKOUT_NAME, ROLES_DIR / "__init__.py",
                                                  submodule_search_locations=[str(ROLES_DIR)])
    if spec is None or spec.loader is None:
        raise ImportError(f"sparkguard: no roles package at {ROLES_DIR}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CHECKOUT_NAME] = module
    spec.loader.exec_module(module)
    return module


def register() -> None:
    """Hand the shipped roles to the core (sparkguard.registry): what every entry point does first."""
    package().register()


def role(name: str) -> ModuleType:
    """One shipped role's package, e.g. ``role("earlyoom").ROLE``."""
    return importlib.import_module(f"{package().__name__}.{name}")
