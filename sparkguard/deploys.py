"""sparkguard's roles as pyinfra deploys, for teams with a pyinfra deploy of their own.

    # my_deploy.py, run as: pyinfra my-inventory.py my_deploy.py
    from sparkguard.deploys import earlyoom, recovery

    earlyoom(settings={"term_percent": 9, "kill_percent": 4}, node={"memory_total_gib": 121.7})
    recovery()

Each function applies one role (and the roles it needs: ``swap`` and ``vllm`` bring ``base``) with
the settings it is given, validated by the same schema and role checks as an inventory: a bad value
stops the deploy with the same paragraph (host, field, value, what is allowed) before anything
changes on that host. The settings are the role's own block, as under ``earlyoom:`` in hosts.yml;
``node`` is the ``node:`` block. Host and connection come from your pyinfra inventory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyinfra import host
from pyinfra.api import deploy

from . import builtin_roles, registry
from .engine.converge import check_node, converge, current_node_info, node_profile, role_preflight
from .engine.preflight import PreflightError
from .errors import Problem
from .hostconfig import HostConfig, host_config_model
from .inventory.loader import problems_from_validation, role_problems
from .role import Role, RoleContext


def _roles() -> tuple[Role, ...]:
    if not registry.registered():
        builtin_roles.register()  # this module is an entry point: the shipped roles, unless a caller chose
    return registry.roles()


def with_requirements(name: str) -> list[Role]:
    """The role and every role it needs or works with (Role.requires, Role.uses), in the order the site
    applies them."""
    by_name = {role.name: role for role in _roles()}
    if name not in by_name:
        raise PreflightError([Problem("", "role", name, f"no such role; choose one of {', '.join(by_name)}")])
    return registry.with_requirements(name, uses=True)


def role_config(host_name: str, name: str, settings: Mapping[str, Any] | None = None,
                node: Mapping[str, Any] | None = None) -> HostConfig:
    """Validated settings for applying role ``name`` alone: the others are switched off (exit-2 paragraphs)."""
    applied = {role.name for role in with_requirements(name)}
    document: dict[str, Any] = {"ssh_host": host_name, "node": dict(node or {})}
    for role in _roles():
        document[role.name] = dict(settings or {}) if role.name == name else {"enabled": role.name in applied}
    label = f"{name}(settings=...)"
    model = host_config_model()
    try:
        config: HostConfig = model.model_validate(document)
    except Exception as error:  # pydantic's ValidationError: turned into the inventory's paragraphs
        from pydantic import ValidationError

        if not isinstance(error, ValidationError):
            raise
        raise PreflightError(problems_from_validation(host_name, error, model, {}, label)) from None
    problems = role_problems(host_name, config, {}, label)
    if problems:
        raise PreflightError(problems)
    return config


def _deploy_for(name: str) -> Callable[..., None]:
    @deploy(f"sparkguard {name}")
    def apply(settings: Mapping[str, Any] | None = None, node: Mapping[str, Any] | None = None) -> None:
        config = role_config(host.name, name, settings, node)
        info = current_node_info(config)
        if info is None:
            return  # the node could not be read: nothing is planned for it, and the report says why
        problems = check_node(host.name, config, info) + role_preflight(host.name, config, info)
        if problems:
            raise PreflightError(problems)
        ctx = RoleContext(host=host.name, config=config, node=node_profile(config, info))
        for role in with_requirements(name):
            converge(role.desired_state(ctx))

    apply.__doc__ = f"Apply sparkguard's role '{name}' (and the roles it needs) with these settings."
    return apply  # type: ignore[return-value]  # pyinfra wraps it in its own callable type


_made: dict[str, Callable[..., None]] = {}


def __getattr__(name: str) -> Callable[..., None]:
    """``from sparkguard.deploys import earlyoom``: one deploy per registered role, made on first use (the core
    names no role; the registry does)."""
    if name.startswith("__") or name not in {role.name for role in _roles()}:
        raise AttributeError(f"module 'sparkguard.deploys' has no attribute '{name}' "
                             f"(roles: {', '.join(role.name for role in _roles())})")
    if name not in _made:
        _made[name] = _deploy_for(name)
    return _made[name]


def __dir__() -> list[str]:
    return sorted([*globals(), *(role.name for role in _roles())])
