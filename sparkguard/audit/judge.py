"""The node against its desired states, offline: the probe's output judged file by file, service by service,
then by each role's own checks (``Role.audit_checks``). Nothing here touches a node."""

from __future__ import annotations

from .. import registry
from ..engine.operations import instances_of
from ..engine.probe import absent_files_key, absent_units_key, edit_key
from ..inventory.loader import InventoryHost
from ..state import DesiredState, Service
from .checks import AuditView, Check, ProbeOutput, ensure_key, file_problem, short
from .result import HostAudit

ENABLED_STATES = {"enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "linked"}


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
