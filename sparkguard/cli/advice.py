"""Advice across the whole inventory, from each role's ``fleet_advice``: printed, never an error.

Some risks only show across hosts (a node no other node watches); a lab inventory may accept
them, a fleet should not, so validate and apply say it and go on.
"""

from __future__ import annotations

from .. import registry
from ..inventory.loader import Inventory


def fleet_advice(inventory: Inventory) -> list[str]:
    ROLES = registry.roles()

    advice: list[str] = []
    for role in ROLES:
        if role.fleet_advice is None:
            continue
        configs = {h.name: h.config for h in inventory.hosts if role.enabled(h.config)}
        if configs:
            advice += list(role.fleet_advice(configs))
    return advice
