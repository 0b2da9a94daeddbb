"""Desired state of role ``base``."""

from __future__ import annotations

import json
from typing import Any

from sparkguard import __version__
from sparkguard.layout import CONFIG_DIR, LIB_DIR, STATE_DIR, TEXTFILE_DIR, unit_path
from sparkguard.role import RoleContext, shipped_program
from sparkguard.settings import masked_dump
from sparkguard.state import DesiredState, Directory, ManagedFile
from sparkguard.templating import render_template

from .interface import NODE_JSON, SYSCTL_CHECK, TRAINING_TARGET

SYSCTL_CHECK_SOURCE = shipped_program(__file__, "sysctl-check.sh")


def node_document(ctx: RoleContext) -> dict[str, Any]:
    """The node's validated settings and budget inputs, as node-side tools read them.

    Connection settings stay on the operator's side: a node has no business
    knowing how the laptop reaches it.
    """
    settings = masked_dump(ctx.config, exclude=set(ctx.config.connection_fields()))
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
            Directory(LIB_DIR),
            # Shared with Debian's prometheus packages, which may chown them: exist, nothing more.
            Directory("/var/lib/prometheus", mode=None, owner=None, group=None),
            Directory(TEXTFILE_DIR, mode=None, owner=None, group=None),
        ),
        files=(
            ManagedFile(SYSCTL_CHECK, SYSCTL_CHECK_SOURCE.read_text(), mode="0755", validate="sh -n {path}"),
            ManagedFile(NODE_JSON, document, mode="0644",
                        validate="! command -v python3 >/dev/null || python3 -m json.tool {path} >/dev/null"),
            # Training mode has one owner, here; roles swap and vllm add their part with drop-ins.
            ManagedFile(unit_path(TRAINING_TARGET), render_template("base/training.target.j2",
                                                                    training_target=TRAINING_TARGET),
                        validate="systemd-analyze verify {path}"),
        ),
    )
