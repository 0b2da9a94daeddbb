"""The one read-only script ``sparkguard audit`` runs on a node: every variant of the host's desired state,
and what each role asks to read about itself (``Role.audit_probe``)."""

from __future__ import annotations

from .. import registry
from ..engine.desired import variant_states
from ..engine.probe import NodeProbe, script, state_lines
from ..inventory.loader import InventoryHost
from ..state import DesiredState


def probe_states(entry: InventoryHost) -> list[DesiredState]:
    """Every variant of the host's desired state the live node could select (Role.live_alternatives):
    the probe reads them all in one round trip; ``evaluate`` then judges the variant the node is."""
    return variant_states(entry.name, entry.config)


def build_probe(entry: InventoryHost, states: list[DesiredState]) -> str:
    """The one script run on the node. Read-only: it only reads files, /proc, /sys and systemd."""
    lines = state_lines(states)
    roles = {s.role for s in states}
    for role in registry.roles():
        if role.audit_probe is not None and role.name in roles:
            lines += role.audit_probe(entry.config)
    return script(lines)


AuditProbe = NodeProbe
