"""Apply's read of a node: every role's current state in ONE round trip, trusted until the first change.

Without it, every operation reads its own facts: 32 SSH round trips per host for an apply that
changes nothing, the common case (a rerun after every merge). The snapshot runs the audit's probe
(sparkguard.probe, the same lines the audit judges by) once per host before anything is planned.
Operations get their current state from it as a ``Known``: while no operation of this run has
changed anything on the host, the snapshot is exact and an operation with nothing to do costs no
round trip. After the first change (a package install creating files, a restart), every later
operation reads the node itself again, exactly as without a snapshot. The node lock
(sparkguard.node_lock) keeps other applies out meanwhile.
"""

from __future__ import annotations

import posixpath
from typing import Any

from pyinfra import host, state

from .auditing import ProbeOutput
from .desired import variant_states
from .hostconfig import HostConfig
from .operations import STAGE_DIR, UPLOAD_DIR, FileState, Known
from .probe import NodeProbe, parse_output, script, state_lines
from .state import DesiredState

# (host, probe script) -> what it read; one script per host for the site deploy. A team's deploy that
# calls several roles with their own settings gets one per distinct set of settings.
_taken: dict[tuple[str, str], ProbeOutput] = {}
_latest: dict[str, ProbeOutput] = {}


def clear() -> None:
    """Forget every snapshot (a new run reads the nodes again)."""
    _taken.clear()
    _latest.clear()


def take(host_name: str, config: HostConfig) -> ProbeOutput:
    """The current host's snapshot, read once per run: the node's facts and every variant of its states."""
    text = script(state_lines(variant_states(host_name, config), for_apply=True))
    key = (host_name, text)
    if key not in _taken:
        _taken[key] = parse_output(host.get_fact(NodeProbe, script=text) or "")
    _latest[host_name] = _taken[key]
    return _taken[key]


def fresh() -> bool:
    """Inside an operation: nothing that ran before it in this run changed this host (so the snapshot holds).

    Operations of other deploys in the same run (a team's own) count too: any change invalidates it.
    In a dry run nothing executes, so the snapshot always holds.
    """
    current = host.current_op_hash
    host_ops = state.ops.get(host, {})
    for op_hash in host.op_hash_order:
        if op_hash == current:
            return True
        data = host_ops.get(op_hash)
        if data is not None and data.operation_meta.is_complete() and data.operation_meta.did_change():
            return False
    return True


def known(value: Any) -> Known:
    return Known(value, fresh)


def covering(desired: DesiredState) -> ProbeOutput | None:
    """This host's snapshot if it read everything ``desired`` is about (else the role reads its own facts)."""
    snap = _taken_for_host()
    if snap is None:
        return None
    paths = [f.path for f in desired.files] + [e.path for e in desired.edits]
    if not all(p in snap.files for p in paths) or not all(p in snap.packages for p in desired.packages):
        return None
    return snap


def _taken_for_host() -> ProbeOutput | None:
    return _latest.get(host.name)


def file_state(seen: tuple[str, str]) -> FileState | None:
    """The probe's ``mode:owner:group`` and sha256 as ``ManagedFileState`` gives them (None: absent)."""
    if seen[0] == "absent":
        return None
    mode, owner, group = (seen[0].split(":") + ["", ""])[:3]
    return {"mode": mode, "owner": owner, "group": group, "sha256": seen[1]}


def leftovers(snap: ProbeOutput, directories: tuple[str, ...]) -> dict[str, list[str]]:
    """What ``operations.Leftovers`` would find in ``directories``, from the snapshot's one listing."""
    stages = {posixpath.join(d, STAGE_DIR) for d in directories}
    found: dict[str, list[str]] = {"staging": [], "uploads": [], "pending": []}
    for item in snap.runtime.get("leftovers", "").split():
        if item.startswith("pending:"):
            found["pending"].append(item.removeprefix("pending:"))
        elif item in stages:
            found["staging"].append(item)
        elif item.startswith(UPLOAD_DIR + "/"):
            found["uploads"].append(item)
    return found
