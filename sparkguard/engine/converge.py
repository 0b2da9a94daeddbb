"""Turn a role's desired state into pyinfra operations.

Shared by every role, so no role repeats the package / validated file /
restart-on-change dance. Restarts are gated with an ``_if`` callable (did this very file change in this
run?), never ``restarted=op.did_change`` (a bound method, always truthy), so the second apply reports
zero changes.

An apply can die anywhere (killed, connection lost). Files go live by rename, so each is old or
new, never half; a change records its pending restart/reload/daemon-reload on the node before it
goes live, and the next apply runs what is pending and removes what was left staged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt, files, systemd

from .. import registry
from ..audit.checks import ProbeOutput, ensure_key
from ..errors import Problem
from ..facts import NodeInfo
from ..hostconfig import HostConfig, host_config_model
from ..role import Role, RoleContext
from ..run import channel_eof, livediff, node_lock, snapshot
from ..run import context as run_context
from ..state import DesiredState, FileEdit, ManagedFile, is_systemd_unit_path
from .desired import node_profile
from .filestate import FileState, ManagedFilesState, file_state
from .operations import (
    FETCH,
    FileSpec,
    FileText,
    Leftovers,
    MatchingFiles,
    TemplateUnits,
    directories,
    directory_item,
    ensure,
    file_item,
    instances_of,
    leftovers_removed,
    managed_file,
    managed_files,
    path_changed,
    pending_marker,
    service_action,
    sysctl,
    unit_item,
    unit_masked,
)
from .operations import service as service_state
from .preflight import PreflightError
from .probe import NodeFacts, absent_files_key, absent_units_key, edit_key, stage_directories

__all__ = ["node_profile", "converge", "current_context", "role_deploy", "site_deploy"]

MEMORY_TOLERANCE = 0.02


def check_node(host_name: str, config: HostConfig, info: NodeInfo) -> list[Problem]:
    """Compare what the inventory declares with what the node reports."""
    problems = []
    declared = config.node.memory_total_gib
    if declared is not None and info.memory_total_bytes:
        actual = info.memory_total_gib
        if abs(actual - declared) > MEMORY_TOLERANCE * declared:
            problems.append(Problem(
                host_name, "node.memory_total_gib", declared,
                f"the node reports MemTotal = {actual:.2f} GiB, more than 2% away from the declared value; "
                f"fix the inventory (did the node get a different memory size or the wrong inventory entry?)",
            ))
    profile = config.node.device_profile
    if profile != "auto" and profile != info.device_class:
        problems.append(Problem(
            host_name, "node.device_profile", profile,
            f"the node looks like '{info.device_class}' ({info.device_evidence}); declare that, or 'auto'",
        ))
    return problems


def role_preflight(host_name: str, config: HostConfig, info: NodeInfo) -> list[Problem]:
    """Each enabled role's checks against the live node (e.g. earlyoom's version)."""
    ROLES = registry.roles()

    problems = []
    for role in ROLES:
        if role.preflight is not None and role.enabled(config):
            for problem in role.preflight(config, info):
                problems.append(replace(problem, host=host_name))
    return problems


def current_node_info(config: HostConfig) -> NodeInfo | None:
    """The node's facts, from this run's snapshot of it (one round trip that also reads every role's state);
    kept in the run's context for the report.

    None when pyinfra failed the host while reading it (its connection ended): nothing is planned for it, as
    nothing would run, and nothing is checked against facts that were never read; the report says why.

    Every sparkguard deploy reads the node here first, so this is where pyinfra's own SSH connector (the
    plain pyinfra path) gets its commands' stdin EOFs put in order too (``channel_eof``)."""
    channel_eof.install_on(host)
    info = snapshot.take(host.name, config).info
    if host in host.state.failed_hosts:
        return None
    run_context.current().node_info[host.name] = info
    return info


def current_context() -> RoleContext | None:
    """Validated settings of the current host, checked against the node itself (None: the node could not be
    read, see ``current_node_info``)."""
    settings = host.data.get("sparkguard")
    if not settings:
        raise PyinfraError(
            f"host '{host.name}' has no sparkguard settings: run the deploy against a sparkguard inventory "
            f"(inventory/<name>/inventory.py), not a bare host name"
        )
    config = host_config_model().model_validate(settings)
    info = current_node_info(config)
    if info is None:
        return None
    problems = check_node(host.name, config, info) + role_preflight(host.name, config, info)
    if problems:
        raise PreflightError(problems)
    return RoleContext(host=host.name, config=config, node=node_profile(config, info))


DAEMON_RELOAD = pending_marker("systemd", "daemon-reload")


def _markers(state: DesiredState, path: str) -> tuple[str, ...]:
    """The pending markers a change of ``path`` sets: each restart/reload it triggers, daemon-reload for units."""
    markers = [pending_marker(s.name, "restart") for s in state.services if s.running and path in s.restart_on]
    markers += [pending_marker(s.name, "reload") for s in state.services if s.running and path in s.reload_on]
    if state.file(path).is_systemd_unit:
        markers.append(DAEMON_RELOAD)
    return tuple(markers)


Table = Callable[[ProbeOutput], dict[str, Any]]


def _hint(state: DesiredState, snap: ProbeOutput | None, table: Table, key: str, item: str | None = None,
          convert: Callable[[Any], Any] = lambda v: v) -> Any:
    """A ``Known`` value when the snapshot read ``key`` (once stale: read again with the role's other
    state, ``snapshot.role_read``), else ``FETCH`` (the operation reads it)."""
    if snap is None or key not in table(snap):
        return FETCH
    return snapshot.known(convert(table(snap)[key]), item, state, snapshot.picked(table, key, convert))


def _files(read: ProbeOutput) -> dict[str, Any]:
    return read.files


def _directories(read: ProbeOutput) -> dict[str, Any]:
    return read.directories


def _enabled(read: ProbeOutput) -> dict[str, Any]:
    return {name: seen[0] for name, seen in read.services.items()}


def _sysctls(read: ProbeOutput) -> dict[str, Any]:
    return read.sysctls


def _units(read: ProbeOutput) -> dict[str, Any]:
    return read.units


def _ensures(read: ProbeOutput) -> dict[str, Any]:
    return read.ensures


Changed = Callable[[], bool]  # "did it change in this run?", asked when a restart is due


def _install_files(state: DesiredState, files: list[ManagedFile], snap: ProbeOutput | None) -> dict[str, Changed]:
    """One operation for ``files`` (one upload, one command to check and rename them all, in their order);
    for each path, whether it changed."""
    if not files:
        return {}
    op = managed_files(
        name=f"{state.role}: files",
        files=tuple(FileSpec.of(m, _markers(state, m.path)) for m in files),
        current={m.path: _hint(state, snap, _files, m.path, file_item(m.path), file_state) for m in files},
        fence=node_lock.fence_token(host.name),
    )
    return {m.path: path_changed(op, m.path) for m in files}


def converge(state: DesiredState) -> None:
    """Apply one role's desired state on the current host, one step per kind, in this order.

    Current state comes from this run's snapshot of the node (sparkguard.run.snapshot) when it read this role;
    otherwise each step reads its own facts.
    """
    if livediff.collecting() and state.files:
        live = host.get_fact(livediff.LiveFiles, paths=tuple(f.path for f in state.files),
                             secret=tuple(f.path for f in state.files if f.secret))
        livediff.record(host.name, state, live)
    snap = snapshot.covering(state)
    missing = _missing_packages(state, snap)
    pending = _clear_leftovers(state, snap)
    file_ops = _install_files(state, [m for m in state.files if m.before_packages], snap)
    if missing:
        apt.packages(name=f"{state.role}: install {' '.join(missing)}", packages=missing, update=True,
                     cache_time=3600, no_recommends=True)
    if state.directories:
        directories(name=f"{state.role}: directories", items=state.directories,
                    current={d.path: _hint(state, snap, _directories, d.path, directory_item(d.path))
                             for d in state.directories})
    file_ops.update(_install_files(state, [m for m in state.files if not m.before_packages], snap))
    edit_ops = _apply_edits(state, snap)
    removed = _converge_absent(state, snap)
    reload_triggers = [op for path, op in file_ops.items() if state.file(path).is_systemd_unit]
    reload_triggers += [op.did_change for edit, op in edit_ops if edit.generator_input]
    reload_triggers += [op.did_change for path, op in removed.items() if is_systemd_unit_path(path)]
    if reload_triggers or DAEMON_RELOAD in pending:
        service_action(name=f"{state.role}: systemd daemon-reload", service="", action="daemon-reload",
                       marker=DAEMON_RELOAD, _if=_changed_or_pending(reload_triggers, DAEMON_RELOAD in pending))
    for service in state.services:
        if service.masked is not None:
            unit_masked(name=f"{state.role}: {'mask' if service.masked else 'unmask'} {service.name}",
                        unit=service.name, masked=service.masked,
                        current=_hint(state, snap, _enabled, service.name, unit_item(service.name)))
    if state.sysctls and not _in_container(snap):
        # In a container /proc/sys is the host's: the file is installed, the values are the host's business.
        for key, value in sorted(state.sysctls.items()):
            sysctl(name=f"{state.role}: sysctl {key}", key=key, value=value,
                   current=_hint(state, snap, _sysctls, key))
    _converge_services(state, file_ops, pending, snap)
    for index, item in enumerate(state.ensures):
        ensure(name=f"{state.role}: {item.description}", check=item.check, fix=item.fix,
               holds=_hint(state, snap, _ensures, ensure_key(state, index)))


def _in_container(snap: ProbeOutput | None) -> bool:
    info = snap.info if snap else run_context.current().node_info.get(host.name) or host.get_fact(NodeFacts)
    return info.container


def _missing_packages(state: DesiredState, snap: ProbeOutput | None) -> list[str]:
    if not state.packages:
        return []
    if snap is not None:
        return [name for name in state.packages if snap.packages.get(name) != "installed"]
    installed = host.get_fact(DebPackages) or {}
    return [name for name in state.packages if name not in installed]


def _clear_leftovers(state: DesiredState, snap: ProbeOutput | None) -> set[str]:
    """Remove what an interrupted apply left next to this role's files; return the markers it left pending."""
    directories = tuple(stage_directories([state]))
    found = snapshot.leftovers(snap, directories) if snap else host.get_fact(Leftovers, directories=directories)
    leftovers_removed(name=f"{state.role}: leftovers of an interrupted apply", directories=directories, found=found)
    return {pending_marker(*name.rsplit(".", 1)) for name in (found or {}).get("pending", []) if "." in name}


def _apply_edits(state: DesiredState, snap: ProbeOutput | None) -> list[tuple[FileEdit, OperationMeta]]:
    """(edit, operation) for each in-place edit whose file exists (an absent file has nothing to edit)."""
    applied = []
    for index, edit in enumerate(state.edits):
        if snap is not None:
            current = snap.edits.get(edit_key(state, index))
            mode_owner: FileState = file_state(snap.files[edit.path]) or {}
            known = _hint(state, snap, _files, edit.path, file_item(edit.path), file_state)
        else:
            current = host.get_fact(FileText, path=edit.path)
            mode_owner = (host.get_fact(ManagedFilesState, paths=(edit.path,)) or {}).get(edit.path) or {}
            known = FETCH
        if current is None:
            continue
        applied.append((edit, managed_file(
            name=f"{state.role}: edit {edit.path} ({edit.description})",
            path=edit.path,
            content=edit.transform(current),
            mode=mode_owner.get("mode", "644"),
            owner=mode_owner.get("owner", "root"),
            group=mode_owner.get("group", "root"),
            validate=edit.validate,
            pending=(DAEMON_RELOAD,) if edit.generator_input else (),
            current=known,
        )))
    return applied


def _converge_absent(state: DesiredState, snap: ProbeOutput | None) -> dict[str, OperationMeta]:
    """Stop instances and remove files the desired state no longer has (pyinfra's own present=False)."""
    for index, absent in enumerate(state.absent_instances):
        key = absent_units_key(state, index)
        if snap is not None and key in snap.runtime:
            units = snap.runtime[key].split()
        else:
            units = host.get_fact(TemplateUnits, template=absent.template) or []
        for name in sorted(set(instances_of(absent.template, units)) - set(absent.keep)):
            for template in (absent.template, *absent.companions):
                systemd.service(name=f"{state.role}: stop {template.format(name)} ({absent.description})",
                                service=template.format(name), running=False, enabled=False)
            for path in absent.files:
                files.file(name=f"{state.role}: remove {path.format(name)} ({absent.description})",
                           path=path.format(name), present=False)
    own = {f.path for f in state.files}
    removed: dict[str, OperationMeta] = {}
    for index, absent_files in enumerate(state.absent_files):
        key = absent_files_key(state, index)
        if snap is not None and key in snap.runtime:
            found = sorted(set(snap.runtime[key].split()))
        else:
            found = host.get_fact(MatchingFiles, globs=absent_files.globs) or []
        for path in found:
            if path not in own and path not in removed:
                removed[path] = files.file(name=f"{state.role}: remove {path} ({absent_files.description})",
                                           path=path, present=False)
    return removed


def _converge_services(state: DesiredState, file_ops: dict[str, Changed], pending: set[str],
                       snap: ProbeOutput | None) -> None:
    """Restart/reload what a changed (or still pending) file calls for, then running/enabled as declared.

    Every restart first, then the states: after the restarts the role's units are read again once
    (``snapshot.role_read``), not once per service.
    """
    for service in state.services:
        for action, paths in (("restart", service.restart_on), ("reload", service.reload_on)):
            triggers = [file_ops[p] for p in paths if p in file_ops]
            marker = pending_marker(service.name, action)
            if (triggers or marker in pending) and service.running:
                service_action(name=f"{state.role}: {action} {service.name} (config changed)", service=service.name,
                               action=action, marker=marker, _if=_changed_or_pending(triggers, marker in pending))
    for service in state.services:
        if service.running is None and service.enabled is None:
            continue
        service_state(
            name=f"{state.role}: {service.name} {'running' if service.running else 'stopped'}",
            service=service.name,
            running=service.running,
            enabled=service.enabled,
            current=_hint(state, snap, _units, service.name, unit_item(service.name)),
        )


def _changed_or_pending(triggers: list[Changed], pending: bool) -> Callable[[], bool]:
    """An ``_if`` callable: one of ``triggers`` changed in this run, or an earlier run left it pending."""
    return lambda: pending or any(changed() for changed in triggers)


def role_deploy(role: Role) -> Callable[..., Any]:
    """The pyinfra ``@deploy`` for a role: desired state from settings, then converge."""

    @deploy(f"sparkguard {role.name}")
    def apply_role() -> None:
        ctx = current_context()
        if ctx is not None and role.enabled(ctx.config):
            converge(role.desired_state(ctx))

    apply_role.__doc__ = f"Apply role '{role.name}': {role.summary}."
    return apply_role


def site_deploy() -> Callable[..., Any]:
    """Every enabled role, in registry order."""
    ROLES = registry.roles()

    @deploy("sparkguard site")
    def apply_site() -> None:
        ctx = current_context()
        if ctx is None:
            return
        for role in ROLES:
            if role.enabled(ctx.config):
                converge(role.desired_state(ctx))

    return apply_site
