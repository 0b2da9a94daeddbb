"""``sparkguard audit``: what a node has, compared with what apply would give it. Read-only.

Per host, ONE command over SSH (one round trip after the connection is set up):
a probe script built from the host's desired states (``render.host_states``)
prints, line by line, the sha256/mode/owner of every managed file, each
package's status, each service's enabled/active state, each sysctl's live value,
the result of each ``Ensure`` check (the same check apply runs before fixing),
and the runtime facts the protections rest on (earlyoom's command line, sshd's
oom_score_adj, PID 1's watchdog, the journal, cgroup memory protection, ...).
Everything is then compared here, offline. The probe writes nothing on the node.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pyinfra.api import Config, State
from pyinfra.api import Inventory as PyinfraInventory
from pyinfra.api.connect import disconnect_all
from pyinfra.api.facts import get_fact
from pyinfra.api.host import Host
from pyinfra.api.state import StateStage
from pyinfra.connectors.sshuserclient.client import get_host_keys
from pyinfra.context import ctx_host, ctx_state

from . import registry
from .auditing import AuditView, Check, ProbeOutput, ensure_key, file_problem, short
from .engine.desired import variant_states
from .engine.operations import instances_of
from .engine.probe import (
    MANAGER,
    NodeProbe,
    absent_files_key,
    absent_units_key,
    edit_key,
    parse_output,
    script,
    state_lines,
)
from .engine.render import host_states
from .facts import NodeInfo
from .inventory import Inventory, InventoryHost
from .run.runner import ConnectErrors, connect_hosts, explain_connect_error, quiet_pyinfra
from .selection import select_hosts
from .state import DesiredState, Service

# SSH round trips per host: the connection (key exchange + auth), then this many commands.
COMMANDS_PER_HOST = 1
ENABLED_STATES = {"enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "linked"}
__all__ = ["MANAGER", "parse_output", "build_probe", "probe_states", "run_audit"]


@dataclass
class HostAudit:
    host: str
    checks: list[Check] = field(default_factory=list)
    node: NodeInfo | None = None
    seconds: float = 0.0
    commands: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, expected: str, actual: str) -> None:
        self.checks.append(Check(name, bool(ok), expected, actual))


@dataclass
class AuditResult:
    hosts: list[HostAudit]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "ssh_commands_per_host": COMMANDS_PER_HOST,
            "hosts": [
                {"host": h.host, "ok": h.ok, "commands": h.commands,
                 "checks": [asdict(c) for c in h.checks]}
                for h in self.hosts
            ],
        }


# ---------------------------------------------------------------- the probe


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


# ---------------------------------------------------------------- comparisons


def _service_problem(service: Service, seen: tuple[str, str] | None) -> str | None:
    enabled, active = seen or ("", "")
    if service.masked is True and enabled != "masked":
        return f"{service.name} not masked ({enabled or 'unknown'})"
    if service.masked is False and enabled == "masked":
        return f"{service.name} masked"
    if service.enabled and enabled not in ENABLED_STATES:
        return f"{service.name} {enabled or 'not found'}"
    if service.running and active != "active":
        return f"{service.name} {active or 'unknown'}"
    if service.running is False and active == "active":
        return f"{service.name} running"
    return None


def _left_behind(state: DesiredState, rt: dict[str, str]) -> list[str]:
    """Files and unit instances on the node that the state's Absent* entries say must go."""
    own = {f.path for f in state.files}
    left = []
    for index, _ in enumerate(state.absent_files):
        left += [p for p in rt.get(absent_files_key(state, index), "").split() if p not in own]
    for index, gone in enumerate(state.absent_instances):
        units = rt.get(absent_units_key(state, index), "").split()
        left += [gone.template.format(n) for n in instances_of(gone.template, units) if n not in gone.keep]
    return left


def _state_checks(state: DesiredState, probe: ProbeOutput) -> list[Check]:
    """The node against one desired state: packages, files, services, sysctls, edits, ensures, absent things."""
    audit = HostAudit(state.role)
    add = audit.add
    info, rt = probe.info, probe.runtime
    if state.packages:
        missing = [p for p in state.packages if probe.packages.get(p) != "installed"]
        add(f"{state.role}: packages", not missing, "installed: " + ", ".join(state.packages),
            "missing: " + ", ".join(missing) if missing else "all installed")
    if state.files:
        problems = [p for m in state.files if (p := file_problem(m, probe.files.get(m.path)))]
        add(f"{state.role}: files", not problems, f"{len(state.files)} files as rendered",
            short(problems) if problems else f"{len(state.files)} files match")
    if state.services:
        problems = [p for s in state.services if (p := _service_problem(s, probe.services.get(s.name)))]
        add(f"{state.role}: services", not problems,
            ", ".join(s.name for s in state.services if s.running or s.masked is not None or s.enabled),
            short(problems) if problems else "as desired")
    if state.sysctls:
        wrong = [f"{k} = {probe.sysctls.get(k, '?')}" for k, v in sorted(state.sysctls.items())
                 if probe.sysctls.get(k) != " ".join(v.split())]
        expected = ", ".join(f"{k} = {v}" for k, v in sorted(state.sysctls.items()))
        if wrong and info.container:
            add(f"{state.role}: sysctls", True, expected,
                f"container: the values are the host kernel's ({', '.join(wrong)}); the file is installed")
        else:
            add(f"{state.role}: sysctls", not wrong, expected, ", ".join(wrong) if wrong else "live")
    for index, edit in enumerate(state.edits):
        current = probe.edits.get(edit_key(state, index))
        ok = current is None or edit.transform(current) == current
        add(f"{state.role}: {edit.path}", ok, edit.description,
            "absent (nothing to edit)" if current is None else ("as desired" if ok else "not yet edited"))
    for index, item in enumerate(state.ensures):
        ok = probe.ensures.get(ensure_key(state, index), False)
        add(f"{state.role}: {item.description}", ok, "holds", "holds" if ok else "does not hold")
    if state.absent_files or state.absent_instances:
        left = _left_behind(state, rt)
        add(f"{state.role}: nothing left that it no longer has", not left,
            "no file or instance the inventory dropped", short(left) if left else "none")
    return audit.checks


def evaluate(entry: InventoryHost, states: list[DesiredState], probe: ProbeOutput) -> list[Check]:
    """Every check of one host, from its desired states and what the probe saw."""
    audit = HostAudit(entry.name)
    add = audit.add
    rt = probe.runtime
    cfg = entry.config
    roles = {s.role: s for s in states}

    # Generic: an apply that died half-way (pending restarts, staged or uploaded files) says so.
    leftovers = rt.get("leftovers", "").split()
    add("apply: nothing left half-done", not leftovers, "no pending restart, no staged or uploaded file",
        short(leftovers) if leftovers else "none")

    for state in states:
        audit.checks += _state_checks(state, probe)

    # What each role knows about itself (Role.audit_checks), judged against the variant the node is.
    for role in registry.roles():
        if role.audit_checks is not None and role.name in roles:
            audit.checks += role.audit_checks(AuditView(cfg, probe, roles[role.name]))
    return audit.checks


# ---------------------------------------------------------------- running it


def run_audit(inventory: Inventory, limit: list[str] | None = None, verbose: bool = False) -> AuditResult:
    """Connect to every host (in parallel), run one probe each, compare. Changes nothing."""
    import pyinfra

    started = time.monotonic()
    pyinfra.is_cli = False
    quiet_pyinfra(verbose)
    get_host_keys.cache.clear()
    entries = select_hosts(inventory, limit)
    scripts = {e.name: build_probe(e, probe_states(e)) for e in entries}
    py_inventory = PyinfraInventory(([(h.name, h.pyinfra_data()) for h in entries], {}))
    state = State()
    state.init(py_inventory, Config(CONNECT_TIMEOUT=int(os.environ.get("SPARKGUARD_CONNECT_TIMEOUT", "10"))))
    errors = ConnectErrors()
    state.add_callback_handler(errors)
    state.set_stage(StateStage.Connect)
    results = {e.name: HostAudit(e.name) for e in entries}
    try:
        connect_hosts(state, entries, errors)

        def probe(host: Host) -> tuple[str, str, float]:
            began = time.monotonic()
            with ctx_host.use(host):
                output = get_fact(state, host, AuditProbe, kwargs={"script": scripts[host.name]})
            return host.name, output, time.monotonic() - began

        with ctx_state.use(state):
            greenlets = [state.pool.spawn(probe, host) for host in state.inventory.get_active_hosts()
                         if host.name not in errors.errors]
            state.pool.join()
        for greenlet in greenlets:
            if greenlet.exception is not None:
                continue
            name, output, seconds = greenlet.value
            entry = inventory.host(name)
            parsed = parse_output(output or "")
            audit = results[name]
            audit.node, audit.seconds, audit.commands = parsed.info, seconds, COMMANDS_PER_HOST
            audit.checks = evaluate(entry, host_states(entry, live=parsed.info), parsed)
        for name, audit in results.items():
            if name in errors.errors:
                explained = explain_connect_error(inventory.host(name), errors.errors[name]) + " Nothing was audited on it."
                audit.add("ssh: reachable", False, "connected", explained)
            elif not audit.checks:
                audit.add("ssh: probe", False, "probe ran", "the probe failed on the node (run with -v)")
    finally:
        state.set_stage(StateStage.Disconnect)
        disconnect_all(state)
    return AuditResult([results[e.name] for e in entries], seconds=time.monotonic() - started)
