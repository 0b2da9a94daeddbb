"""What one apply (or dry run) learns about its nodes while it runs, kept in one object.

pyinfra calls sparkguard's operations and facts with nothing that names the run: they read pyinfra's
global ``host`` and ``state``. So the run's own knowledge (the snapshot each node's probe read, what
each operation said it touched or changed, the lock token that fences a node's commits, the live
diffs of a dry run) needs a home that operations can reach without an argument. It lives here, in
one ``RunContext``, rather than in a dictionary per module keyed by host name:

- one place lists everything a run remembers, with its type;
- a run starts with nothing from the one before (``begin`` replaces the whole object; no module is
  forgotten by a ``clear`` nobody called);
- a test or a bench builds the context it wants and reads it back.

The runner begins one per run. A plain ``pyinfra INVENTORY deploy/site.py`` run (no sparkguard
runner) gets one on first use, which lives as long as that process: one run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..audit.checks import ProbeOutput
from ..facts import NodeInfo

# An operation, as pyinfra names it on one host: (host name, operation hash).
OpKey = tuple[str, str | None]


@dataclass
class RunContext:
    """Everything one run remembers between its operations; a new run starts a new one."""

    # (host, probe script) -> what that script read: one probe per host for the site deploy, one per distinct
    # set of settings for a team's deploy that calls roles with their own (sparkguard.run.snapshot.take).
    snapshots: dict[tuple[str, str], ProbeOutput] = field(default_factory=dict)
    # host -> the snapshot its deploy read last (sparkguard.run.snapshot.covering).
    latest_snapshot: dict[str, ProbeOutput] = field(default_factory=dict)
    # (host, role) -> (the operation during which the role's state was read again, what it read): role_read.
    role_reads: dict[tuple[str, str], tuple[str | None, ProbeOutput]] = field(default_factory=dict)
    # What an operation that changed something may have touched, where it can say (operations.footprint).
    footprints: dict[OpKey, frozenset[str]] = field(default_factory=dict)
    # The paths a managed_files or directories operation changed, in order (operations.changed_paths).
    changed_paths: dict[OpKey, tuple[str, ...]] = field(default_factory=dict)
    # host -> the node's facts as the deploy read them (the report's node column; converge.node_info).
    node_info: dict[str, NodeInfo] = field(default_factory=dict)
    # host -> the token of the apply lock this run holds there (node_lock.fence_token).
    lock_tokens: dict[str, str] = field(default_factory=dict)
    # host -> unified diffs of its managed files against the node: a dry run with --diff only (livediff);
    # None while no diff is asked for.
    diffs: dict[str, list[str]] | None = None


_current: RunContext | None = None


def begin(*, collect_diffs: bool = False) -> RunContext:
    """Start a run: a fresh context, which every operation of the run reads through ``current``."""
    global _current
    _current = RunContext(diffs={} if collect_diffs else None)
    return _current


def current() -> RunContext:
    """The run in progress (begun on first use by a run no sparkguard runner started: plain ``pyinfra``)."""
    return _current if _current is not None else begin()
