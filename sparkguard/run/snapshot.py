"""Apply's read of a node: every role's current state in ONE round trip, trusted until the first change.

Without it, every operation reads its own facts: 32 SSH round trips per host for an apply that
changes nothing, the common case (a rerun after every merge). The snapshot runs the audit's probe
(sparkguard.engine.probe, the same lines the audit judges by) once per host before anything is planned.
Operations get their current state from it as a ``Known``: while no operation of this run has
changed anything on the host, the snapshot is exact and an operation with nothing to do costs no
round trip. After a change that could have touched anything (a package install creating files, a
restart), what is known no longer holds; a file written touches only itself (``operations.footprint``),
so what is known of the other files still does. What no longer holds is read again a role at a time
(``role_read``: the probe's lines for that role, one round trip), not one read per operation. The node
lock (sparkguard.run.node_lock) keeps other applies out meanwhile.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

from pyinfra import host, state

from ..audit.checks import ProbeOutput
from ..engine.desired import variant_states
from ..engine.operations import FETCH, STAGE_DIR, UPLOAD_DIR, Known, footprint
from ..engine.probe import HELPERS, MANAGER, NodeProbe, parse_output, q, script, state_lines
from ..hostconfig import HostConfig
from ..state import DesiredState
from . import context as run_context

# What was read lives in the run's RunContext (snapshots, latest_snapshot, role_reads): a new run reads the
# nodes again.


def take(host_name: str, config: HostConfig) -> ProbeOutput:
    """The current host's snapshot, read once per run: the node's facts and every variant of its states."""
    run = run_context.current()
    text = script(state_lines(variant_states(host_name, config), for_apply=True))
    key = (host_name, text)
    if key not in run.snapshots:
        run.snapshots[key] = parse_output(host.get_fact(NodeProbe, script=text) or "")
    run.latest_snapshot[host_name] = run.snapshots[key]
    return run.snapshots[key]


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


def known(value: Any, item: str | None = None, role: DesiredState | None = None,
          pick: Callable[[ProbeOutput], Any] | None = None) -> Known:
    """``value`` as the snapshot read it, trusted while ``item`` is fresh; once stale and given the ``role``
    it belongs to and how to ``pick`` it from a probe's output, read again with the whole role
    (``role_read``: one round trip that serves the role's other questions too)."""
    reread = (lambda: pick(role_read(role, item))) if role is not None and pick is not None else None
    return Known(value, lambda: fresh(item), reread)


def role_read(role: DesiredState, item: str | None = None) -> ProbeOutput:
    """Once the snapshot is stale (a package was installed, a service restarted): ``role``'s whole state read
    again in ONE round trip, the probe's lines for this role only, by the first question that needs it.
    The read answers every later question about the role while nothing that could change the item asked
    about ran since (``fresh(item, since=...)``): a role's files are written after one read, its services
    are started after a second one (restarts come first), not one read per file and service."""
    key = (host.name, role.role)
    role_reads = run_context.current().role_reads
    found = role_reads.get(key)
    if found is None or not fresh(item, since=found[0]):
        text = "\n".join([f"MANAGER={q(MANAGER)}", HELPERS, *state_lines([role], for_apply=True), "true"]) + "\n"
        found = (host.current_op_hash, parse_output(host.get_fact(NodeProbe, script=text) or ""))
        role_reads[key] = found
    return found[1]


def picked(table: Callable[[ProbeOutput], dict[str, Any]], key: str,
           convert: Callable[[Any], Any] = lambda v: v) -> Callable[[ProbeOutput], Any]:
    """How to pick ``key`` from a probe's ``table``: its value, or FETCH when the probe could not tell."""
    return lambda read: convert(table(read)[key]) if key in table(read) else FETCH


def covering(desired: DesiredState) -> ProbeOutput | None:
    """This host's snapshot if it read everything ``desired`` is about (else the role reads its own facts)."""
    snap = run_context.current().latest_snapshot.get(host.name)
    if snap is None:
        return None
    paths = [f.path for f in desired.files] + [e.path for e in desired.edits]
    if not all(p in snap.files for p in paths) or not all(p in snap.packages for p in desired.packages):
        return None
    return snap


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
