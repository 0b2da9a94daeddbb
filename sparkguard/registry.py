"""The roles a run uses, handed in by its entry point; the core iterates over them and imports none.

Entry points are the `sparkguard` CLI, the files in deploy/ and the pyinfra inventory adapter
(sparkguard/pyinfra_inventory.py): each calls ``use(roles.ROLES)`` before anything else. The core
(schema, inventory, render, converge, audit, docs) only ever asks ``roles()``, so a role is the one
place that knows itself, and another set of roles (a team's own) needs no change to the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .role import Role

_roles: tuple[Role, ...] = ()


def use(roles: Sequence[Role]) -> None:
    """Make ``roles`` (in apply order) the ones every core function sees."""
    global _roles
    _roles = tuple(roles)


def registered() -> bool:
    """Whether an entry point has handed the roles over yet."""
    return bool(_roles)


def roles() -> tuple[Role, ...]:
    if not _roles:
        raise RuntimeError("sparkguard: no roles registered; an entry point must call "
                           "sparkguard.registry.use(roles.ROLES) first")
    return _roles


def by_name() -> dict[str, Role]:
    return {role.name: role for role in roles()}


def with_requirements(name: str, uses: bool = False) -> list[Role]:
    """Role ``name`` and every role it needs (``Role.requires``, followed through), in apply order; ``uses``:
    and every role it works with (``Role.uses``), as a deploy of the role alone brings them.

    A KeyError for an unknown name: callers that take a name from an operator say what is allowed.
    """
    known = by_name()
    wanted = {name}
    pending = [known[name].name]
    while pending:
        role = known[pending.pop()]
        for needed in (*role.requires, *(role.uses if uses else ())):
            if needed not in wanted:
                wanted.add(needed)
                pending.append(needed)
    return [role for role in roles() if role.name in wanted]
