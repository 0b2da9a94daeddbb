"""A host's desired states from its validated settings: the one pure step apply, render and audit share.

Roles vary their output on live facts only where a setting is 'auto' (``Role.live_alternatives``);
``variant_states`` lists every variant the live node could select, so one read of the node (the audit's
probe, apply's snapshot) covers whichever it turns out to be, before anyone knows which.
"""

from __future__ import annotations

from .. import registry
from ..facts import NodeInfo
from ..hostconfig import HostConfig
from ..role import NodeProfile, RoleContext
from ..state import DesiredState


def node_profile(config: HostConfig, live: NodeInfo | None = None) -> NodeProfile:
    """What roles may depend on: declared values, so render == apply; ``live`` only resolves an 'auto'."""
    declared = config.node.memory_total_gib
    return NodeProfile(
        memory_total_bytes=int(round(declared * 2**30)) if declared is not None else None,
        device_class=config.node.device_profile,
        live=live,
    )


def states_for(host_name: str, config: HostConfig, live: NodeInfo | None = None) -> list[DesiredState]:
    """Desired state of every enabled role, in registry order (pure: no SSH)."""
    ctx = RoleContext(host=host_name, config=config, node=node_profile(config, live))
    return [role.desired_state(ctx) for role in registry.roles() if role.enabled(config)]


def variant_states(host_name: str, config: HostConfig) -> list[DesiredState]:
    """``states_for`` plus, per role with 'auto' settings, its state for each live node it could meet."""
    states = states_for(host_name, config)
    for role in registry.roles():
        if role.live_alternatives is not None and role.enabled(config):
            for live in role.live_alternatives(config):
                states += [s for s in states_for(host_name, config, live) if s.role == role.name]
    return states
