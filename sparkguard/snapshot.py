"""Apply's read of a node: every role's current state in ONE round trip, trusted until the first change.

Without it, every operation reads its own facts: 32 SSH round trips per host for an apply that
changes nothing, the common case (a rerun after every merge). The snapshot runs the audit's probe
(sparkguard.probe, the same lines the audit judges by) once per host before anything is planned.
Operations get their current state from it as a ``Known``: while no operation of this run has
changed anything on the host, the snapshot is exact and an operation with nothing to do costs no
round trip. After a change that could have touched anything (a package install creating files, a
restart), every later operation reads the node itself again, as without a snapshot; a file written
touches only itself (``operations.footprint``), so what is known of the other files still holds, and
once stale a role's files are read again together (``known_file``). The node lock
(sparkguard.node_lock) keeps other applies out meanwhile.
"""

from __future__ import annotations

import posixpath
from typing import Any

from pyinfra import host, state

from .auditing import ProbeOutput
from .desired import variant_states
from .filestate import FileState, ManagedFilesState, Seen, file_state
from .hostconfig import HostConfig
from .operations import STAGE_DIR, UPLOAD_DIR, Known, file_item, footprint, forget_footprints
from .probe import NodeProbe, parse_output, script, state_lines
from .state import DesiredState

# (host, probe script) -> what it read; one script per host for the site deploy. A team's deploy that
# calls several roles with their own settings gets one per distinct set of settings.
_taken: dict[tuple[str, str], ProbeOutput] = {}
_latest: dict[str, ProbeOutput] = {}


# (host, a role's file paths) -> (the operation that read them, their states): the re-read once stale.
_files_read: dict[tuple[str, tuple[str, ...]], tuple[str | None, dict[str, FileState | None]]] = {}


def clear() -> None:
    """Forget every snapshot (a new run reads the nodes again)."""
    _taken.clear()
    _latest.clear()
    _files_read.clear()
    forget_footprints()


def take(host_name: str, config: HostConfig) -> ProbeOutput:
    """The current host's snapshot, read once per run: the node's facts and every variant of its states."""
    text = script(state_lines(variant_states(host_name, config), for_apply=True))
    key = (host_name, text)
    if key not in _taken:
        _taken[key] = parse_output(host.get_fact(NodeProbe, script=text) or "")
    _latest[host_name] = _taken[key]
    return _taken[key]


def fresh(item: str | None = None, since: str | None = None) -> bool:
    """Inside an operation: nothing that ran before it in this run changed ``item`` on this host (so what
    was read of it holds); ``since``: only operations from that one on count (a later read).

    A change counts unless its operation said it touched only other items (``operations.footprint``:
    a file written touches that file). Without ``item`` every change counts. Operations of other
    deploys in the same run (a team's own) count too. In a dry run nothing executes, so it always holds.
    """
    current = host.current_op_hash
    host_ops = state.ops.get(host, {})
    counting = since is None
    for op_hash in host.op_hash_order:
        if op_hash == current:
            return True
        counting = counting or op_hash == since
        data = host_ops.get(op_hash)
        if not counting or data is None:
            continue
        if data.operation_meta.is_complete() and data.operation_meta.did_change():
            touched = footprint(host.name, op_hash)
            if item is None or touched is None or item in touched:
                return False
    return True


def known(value: Any, item: str | None = None) -> Known:
    return Known(value, lambda: fresh(item))


def known_file(seen: Seen, path: str, role_paths: tuple[str, ...]) -> Known:
    """A file's state from the snapshot; once stale, all of the role's files are read again in ONE round
    trip (by the first of them to need it), and that read serves the others while it holds."""
    return Known(file_state(seen), lambda: fresh(file_item(path)), lambda: _reread_file(path, role_paths))


def _reread_file(path: str, role_paths: tuple[str, ...]) -> FileState | None:
    key = (host.name, role_paths)
    found = _files_read.get(key)
    if found is None or path not in found[1] or not fresh(file_item(path), since=found[0]):
        found = (host.current_op_hash, host.get_fact(ManagedFilesState, paths=role_paths) or {})
        _files_read[key] = found
    return found[1].get(path)  # not answered (a name the batch cannot read): written again, never skipped


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
