"""A role: one concern, its settings, and a pure desired-state function.

Roles never talk to a node themselves. ``converge`` turns their desired state
into pyinfra operations, ``render`` into files for review, so the two can
never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import Problem
from .settings import Settings
from .state import DesiredState

if TYPE_CHECKING:
    from .audit.checks import AuditView, Check
    from .domain.memory.planner import HostPlan
    from .facts import NodeInfo
    from .hostconfig import HostConfig


def shipped_program(role_module: str, name: str) -> Path:
    """A node-side program a role ships as it is, from its ``files/`` folder (``roles/<role>/files/NAME``).

    Programs are real files, never passed through Jinja: their values come from their unit's arguments or
    a file the role writes, so they can be run and tested as they are. ``role_module`` is the calling
    module's ``__file__``.
    """
    return Path(role_module).parent / "files" / name


@dataclass(frozen=True)
class NodeProfile:
    """What a role may know about the node: only what the inventory declares.

    Roles never vary their output on live facts, so ``render`` (offline) and
    apply produce the same bytes; apply checks the declaration against the node.
    """

    memory_total_bytes: int | None
    device_class: str
    # The live node's facts on apply and audit; None on render (offline). Only for resolving a
    # setting the operator left at 'auto' (earlyoom.guard): render then says what it assumed.
    live: NodeInfo | None = None

    @property
    def unified_memory(self) -> bool | None:
        """None while the device profile is 'auto' (unknown until apply)."""
        from .facts import UNIFIED_CLASSES

        if self.device_class == "auto":
            return None
        return self.device_class in UNIFIED_CLASSES


@dataclass(frozen=True)
class RoleContext:
    host: str
    config: HostConfig
    node: NodeProfile

    def settings(self, role: str) -> Any:
        return getattr(self.config, role)


@dataclass(frozen=True)
class Role:
    """Example::

        ROLE = Role(name="base", settings=BaseSettings, desired_state=desired_state,
                    summary="sparkguard's directory layout and node.json")
    """

    name: str
    settings: type[Settings]
    desired_state: Callable[[RoleContext], DesiredState]
    summary: str
    checks: Callable[[HostConfig], Iterable[Problem]] | None = None
    # Shell lines added to the one node-facts probe (sparkguard.facts.probe_lines), each printing key=value;
    # the core keeps the values in NodeInfo.raw and the role reads them with its own parser.
    fact_probe: tuple[str, ...] = ()
    # The node's memory budget from this host's settings (`sparkguard plan`); one role provides it.
    plan: Callable[[str, HostConfig], HostPlan] | None = None
    # Checks that need the live node (versions, devices); run on apply before any operation.
    preflight: Callable[[HostConfig, NodeInfo], Iterable[Problem]] | None = None
    # What an operator should see per host in apply's table and JSON ({column: value}), from the
    # settings and the live node: e.g. which low-memory guard this node got.
    describe: Callable[[HostConfig, NodeInfo | None], dict[str, str]] | None = None
    # Node facts that would change this role's output where a setting is 'auto': the audit reads the
    # files of every variant in its one round trip, then judges the node by the variant it really is.
    live_alternatives: Callable[[HostConfig], tuple[NodeInfo, ...]] | None = None
    # Advice across the whole inventory (not an error: a lab node may rightly stand alone), printed by
    # validate and apply: {host name: config} in, one paragraph per piece of advice out.
    fleet_advice: Callable[[dict[str, HostConfig]], Iterable[str]] | None = None
    # What `sparkguard audit` reads and judges beyond the desired state's files, packages, services,
    # sysctls and checks (sparkguard.audit.checks): shell lines added to the one probe, and their verdicts.
    audit_probe: Callable[[HostConfig], list[str]] | None = None
    audit_checks: Callable[[AuditView], list[Check]] | None = None
    # Roles this one builds on (an enabled role whose requirement is disabled is exit 2), and why.
    requires: tuple[str, ...] = ()
    requires_why: str = ""
    # Roles this one works with where its settings ask for them (its own checks say when: vllm follows base's
    # training target unless during_training is keep). An inventory may leave them off; a deploy of this role
    # alone (sparkguard.deploys) brings them along.
    uses: tuple[str, ...] = ()
    # Roles whose settings this one reads (their defaults where that role is off), through
    # sparkguard.hostconfig.settings_of and their settings class, or whose names it uses (that role's
    # interface.py: a unit, a target, a file it owns): earlyoom spares vllm's band and knows swap's job units,
    # swap reserves earlyoom's SIGTERM line and reads budget's file, monitoring places its alerts on earlyoom's
    # lines. A read is not a requirement.
    reads: tuple[str, ...] = ()

    def enabled(self, config: HostConfig) -> bool:
        return bool(getattr(getattr(config, self.name), "enabled", True))
