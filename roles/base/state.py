"""Desired state of role ``base``."""

from __future__ import annotations

import json

from sparkguard import __version__
from sparkguard.role import RoleContext
from sparkguard.state import DesiredState, Directory, ManagedFile

CONFIG_DIR = "/etc/sparkguard"
STATE_DIR = "/var/lib/sparkguard"
NODE_JSON = f"{CONFIG_DIR}/node.json"


def node_document(ctx: RoleContext) -> dict:
    """The node's validated settings and budget inputs, as node-side tools read them.

    Connection settings stay on the operator's side: a node has no business
    knowing how the laptop reaches it.
    """
    settings = ctx.config.model_dump(mode="json", exclude=set(ctx.config.connection_fields()))
    return {
        "schema": 1,
        "host": ctx.host,
        "sparkguard_version": __version__,
        "node": {
            "memory_total_bytes": ctx.node.memory_total_bytes,
            "device_profile": ctx.node.device_class,
        },
        "settings": settings,
    }


def desired_state(ctx: RoleContext) -> DesiredState:
    document = json.dumps(node_document(ctx), indent=2, sort_keys=True) + "\n"
    return DesiredState(
        role="base",
        directories=(
            Directory(CONFIG_DIR),
            Directory(STATE_DIR),
        ),
        files=(
            ManagedFile(NODE_JSON, document, mode="0644", validate="! command -v python3 >/dev/null || python3 -m json.tool {path} >/dev/null"),
        ),
    )
